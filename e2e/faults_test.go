package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// The fault matrix: every Run:ai fault the simulator can inject, against
// every operation that may reach Run:ai. Each cell installs the fault,
// performs the operation through the real API server (kubectl where users
// would), then clears the fault, runs one background pass and checks the
// invariants that must hold whatever happened:
//
//   - every managed namespace of the matrix is bound after the pass, to
//     exactly one Run:ai project, whose name is its queue;
//   - a project carrying our marker (bind.CreatedByUs) has its namespace,
//     and carries the namespace's ownership label; an adopted one never
//     does;
//   - the adopted project seeded for the run is never deleted or moved;
//   - a refused department move leaves the old department and quota;
//   - no pod of a bound namespace has a foreign queue or, asking for GPUs,
//     another scheduler than Run:ai's; no namespace holds more GPU
//     notebooks than its deserved GPUs;
//   - every refusal (and every warning about a skipped check) names Run:ai
//     and the fault's effect ("HTTP 503", "unavailable", ...).
//
// `make test` runs a representative subset (TestFaultMatrix); the full
// matrix is TestFaultMatrixFull, under the chaos build tag.

// matrixFault is one way Run:ai fails.
type matrixFault struct {
	name  string // column of the table
	short string // in namespace names
	// install puts the fault in place on the simulator.
	install func(s *runaitest.Server) error
	// effects: a refusal or warning caused by the fault contains at least
	// one of them (and "Run:ai").
	effects []string
}

const projectsPath = "/api/v1/org-unit/projects"

var matrixFaults = []matrixFault{
	{name: "down", short: "down", install: func(s *runaitest.Server) error { return s.SetDown(true) },
		effects: []string{"unavailable", "connection refused"}},
	{name: "latency 5s", short: "lat", install: func(s *runaitest.Server) error { s.SetLatency(5 * time.Second); return nil },
		effects: []string{"context deadline exceeded", "no answer before the context ended", "timed out", "unavailable"}},
	{name: "401 every call", short: "401", install: func(s *runaitest.Server) error {
		s.AddFault(runaitest.Fault{Status: 401})
		return nil
	}, effects: []string{"HTTP 401", "unauthorized"}},
	{name: "token revoked", short: "revoked", install: func(s *runaitest.Server) error { s.RevokeTokens(); return nil },
		effects: []string{"HTTP 401", "unauthorized"}},
	{name: "409 on create", short: "409", install: func(s *runaitest.Server) error {
		s.AddFault(runaitest.Fault{Method: "POST", PathPrefix: projectsPath, Status: 409})
		return nil
	}, effects: []string{"HTTP 409", "conflict"}},
	{name: "429 Retry-After 1s", short: "429", install: func(s *runaitest.Server) error {
		s.AddFault(runaitest.Fault{PathPrefix: "/api/v1/", Status: 429, RetryAfter: time.Second})
		return nil
	}, effects: []string{"HTTP 429", "rate limited"}},
	{name: "500", short: "500", install: func(s *runaitest.Server) error {
		s.AddFault(runaitest.Fault{PathPrefix: "/api/v1/", Status: 500})
		return nil
	}, effects: []string{"HTTP 500"}},
	{name: "503", short: "503", install: func(s *runaitest.Server) error {
		s.AddFault(runaitest.Fault{PathPrefix: "/api/v1/", Status: 503})
		return nil
	}, effects: []string{"HTTP 503"}},
	{name: "partial (lost answer)", short: "partial", install: func(s *runaitest.Server) error {
		// The write happens, its answer is lost with the connection.
		s.AddFault(runaitest.Fault{Method: "POST", PathPrefix: projectsPath, DropResponse: true})
		s.AddFault(runaitest.Fault{Method: "DELETE", PathPrefix: projectsPath, DropResponse: true})
		return nil
	}, effects: []string{"unavailable", "EOF", "connection reset"}},
}

func faultByName(name string) matrixFault {
	for _, f := range matrixFaults {
		if f.name == name || f.short == name {
			return f
		}
	}
	panic("no fault " + name)
}

// clearRunAIFaults ends every fault: rules, latency, outage.
func clearRunAIFaults() error {
	env.Sim.ClearFaults()
	env.Sim.SetLatency(0)
	return env.Sim.SetDown(false)
}

// matrixOp is one operation that may reach Run:ai.
type matrixOp struct {
	name  string
	short string
	// prepare sets the cell's namespace up with Run:ai healthy (or, for the
	// first pod, down); run installs the fault and performs the operation;
	// after runs once the fault is cleared and a pass ran.
	prepare func(c *cell)
	run     func(c *cell)
	after   func(c *cell)
}

// cell is one (operation, fault) run.
type cell struct {
	t       *testing.T
	m       *matrix
	op      matrixOp
	fault   matrixFault
	ns      string
	outcome string
	// messages are refusals and warnings the fault caused: each must name
	// Run:ai and the fault's effect.
	messages []string
	// before is the project before a move.
	before     runai.Project
	moveRefuse bool
	problems   []string
	took       time.Duration
	ran        bool
	known      []string
}

func (c *cell) problem(format string, a ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, a...))
}

// knownIssue is a broken invariant already reported as a product
// limitation: shown in the table, a failure only with E2E_KNOWN_BUGS=fail.
func (c *cell) knownIssue(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("E2E_KNOWN_BUGS") == "fail" {
		c.problem("KNOWN: %s", msg)
		return
	}
	c.known = append(c.known, msg)
}

func (c *cell) install() {
	require.NoError(c.t, c.fault.install(env.Sim), "installing fault %s", c.fault.name)
}

// matrix is one run of cells, with its own namespace prefix and adopted project.
type matrix struct {
	t       *testing.T
	prefix  string
	adopted runai.Project
	rows    []*cell
}

var matrixOps = []matrixOp{
	{name: "namespace creation", short: "create", prepare: func(c *cell) {}, run: opCreateNamespace, after: afterBound},
	{name: "first pod", short: "pod", prepare: prepareUnbound, run: opFirstPod, after: afterBound},
	{name: "quota check", short: "quota", prepare: prepareBound, run: opQuotaCheck, after: afterQuota},
	{name: "department move", short: "move", prepare: prepareOwnedWithQuota, run: opMove, after: afterMove},
	{name: "namespace deletion", short: "delete", prepare: prepareBound, run: opDelete, after: afterDelete},
	{name: "reconcile pass", short: "pass", prepare: prepareStale, run: opPass, after: afterBound},
}

func opByName(name string) matrixOp {
	for _, o := range matrixOps {
		if o.name == name || o.short == name {
			return o
		}
	}
	panic("no operation " + name)
}

// --- preparations (Run:ai healthy unless said otherwise) --------------------

func createManaged(t *testing.T, ns, dept string) {
	t.Helper()
	labels := map[string]string{projectLabel: ns}
	if dept != "" {
		labels[deptLabel] = dept
	}
	require.NoError(t, env.Client.Create(ctxT(t, 30*time.Second), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}))
}

func prepareBound(c *cell) {
	createManaged(c.t, c.ns, "")
	waitBound(c.t, c.ns, 30*time.Second)
	c.before = project(c.t, c.ns)
}

// prepareOwnedWithQuota binds the namespace to a project of ours whose
// quota an administrator raised to 3 GPUs (not the default 2), so that a
// move that loses the old quota shows.
func prepareOwnedWithQuota(c *cell) {
	api, err := app.NewRunAIClient(env.Config, logr.Discard())
	require.NoError(c.t, err)
	dept, ok := env.Sim.DepartmentByName("default")
	require.True(c.t, ok)
	_, err = api.CreateProject(ctxT(c.t, 30*time.Second), bind.NewProjectRequest(env.Sim.Cluster().UUID, dept.ID, c.ns, env.Sim.DefaultNodePool(), 3))
	require.NoError(c.t, err)
	createManaged(c.t, c.ns, "")
	got := waitBound(c.t, c.ns, 30*time.Second)
	c.before = project(c.t, c.ns)
	require.Equal(c.t, c.before.ID, got.Labels[idLabel], "the project is ours")
	require.Equal(c.t, 3.0, deserved(c.before))
}

// prepareUnbound leaves the namespace unbound: created while Run:ai is
// down, the controller's bind failed. Run:ai stays down; opFirstPod brings
// it back once the cell's fault is in place.
func prepareUnbound(c *cell) {
	require.NoError(c.t, env.Sim.SetDown(true))
	createManaged(c.t, c.ns, "research")
	// The controller's first bind fails; should it not have tried yet
	// (its workers busy with other namespaces), the cell goes on: the
	// namespace is unbound either way.
	deadline := time.Now().Add(20 * time.Second)
	for findEvent(c.ns, "BindFailed") == "" {
		if time.Now().After(deadline) {
			c.t.Logf("no BindFailed event for %s within 20s: the controller has not tried yet", c.ns)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Empty(c.t, getNamespace(c.t, c.ns).Labels[queueLabel])
}

// prepareStale binds the namespace, then a Run:ai administrator deletes its
// project: the labels lie until a pass repairs them.
func prepareStale(c *cell) {
	prepareBound(c)
	require.True(c.t, env.Sim.DeleteProjectNow(c.ns))
}

// findEvent returns the message of an event of reason about namespace ns.
func findEvent(ns, reason string) string {
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.MatchingFields{"involvedObject.name": ns}); err != nil {
		return ""
	}
	for _, e := range events.Items {
		if e.Reason == reason {
			return e.Message
		}
	}
	return ""
}

// --- operations ---------------------------------------------------------------

func opCreateNamespace(c *cell) {
	c.install()
	start := time.Now()
	createManaged(c.t, c.ns, "research")
	if d := time.Since(start); d > 10*time.Second {
		c.problem("namespace creation waited %s for Run:ai", d)
	}
	// The controller binds at once or fails; a slow Run:ai may still be
	// answering when we stop looking.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if q := getNamespace(c.t, c.ns).Labels[queueLabel]; q != "" {
			c.outcome = fmt.Sprintf("bound at once (%s)", time.Since(start).Round(100*time.Millisecond))
			return
		}
		if msg := findEvent(c.ns, "BindFailed"); msg != "" {
			c.messages = append(c.messages, msg)
			c.outcome = "created unbound: " + excerpt(msg, c.fault)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.outcome = "created, bind still in flight after 8s"
}

func opFirstPod(c *cell) {
	c.install()
	if c.fault.short != "down" {
		require.NoError(c.t, env.Sim.SetDown(false))
	}
	start := time.Now()
	_, stderr, err := env.Kubectl(ctxT(c.t, 60*time.Second), podYAML(c.ns, "first", "notebook", 0, nil, ""), "create", "-f", "-")
	took := time.Since(start)
	if took > 10*time.Second {
		c.problem("the first pod took %s, past the bind webhook's 10s timeout", took.Round(100*time.Millisecond))
	}
	if err != nil {
		msg := refusal(stderr)
		c.messages = append(c.messages, msg)
		c.outcome = fmt.Sprintf("refused in %s: %s", took.Round(100*time.Millisecond), excerpt(msg, c.fault))
		if !strings.Contains(msg, "not bound to Run:ai") {
			c.problem("the refusal does not say the namespace is not bound to Run:ai: %s", msg)
		}
		if c.fault.short == "lat" && !strings.Contains(msg, "not bound to Run:ai yet") {
			c.problem("a slow Run:ai must give 'not bound to Run:ai yet', got: %s", msg)
		}
		return
	}
	c.outcome = fmt.Sprintf("admitted in %s", took.Round(100*time.Millisecond)) + warningsNote(c, stderr)
	if c.fault.short == "lat" {
		c.problem("a bind over a 5s-slow Run:ai cannot finish within the 5s bind timeout, yet the pod was admitted")
	}
}

func opQuotaCheck(c *cell) {
	c.install()
	start := time.Now()
	_, stderr, err := env.Kubectl(ctxT(c.t, 60*time.Second), podYAML(c.ns, "nb-1", "notebook", 1, nil, ""), "create", "-f", "-")
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		msg := refusal(stderr)
		c.messages = append(c.messages, msg)
		c.outcome = fmt.Sprintf("refused in %s: %s", took, excerpt(msg, c.fault))
		c.problem("a 1-GPU notebook in a 2-GPU project was refused (the check is skipped, not failed, when Run:ai cannot be read): %s", msg)
		return
	}
	c.outcome = fmt.Sprintf("admitted in %s", took) + warningsNote(c, stderr)
}

func opMove(c *cell) {
	c.install()
	start := time.Now()
	_, stderr, err := env.Kubectl(ctxT(c.t, 60*time.Second), "", "label", "ns", c.ns, deptLabel+"=research", "--overwrite")
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		msg := refusal(stderr)
		c.t.Logf("kubectl label refused after %s:\n%s", took, stderr)
		c.messages = append(c.messages, msg)
		c.moveRefuse = true
		c.outcome = fmt.Sprintf("refused in %s: %s", took, excerpt(msg, c.fault))
		return
	}
	c.outcome = fmt.Sprintf("moved in %s", took) + warningsNote(c, stderr)
}

func opDelete(c *cell) {
	c.install()
	_, stderr, err := env.Kubectl(ctxT(c.t, 30*time.Second), "", "delete", "namespace", c.ns, "--wait=false")
	if err != nil {
		c.problem("kubectl delete namespace failed: %s", stderr)
	}
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		var ns corev1.Namespace
		if apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKey{Name: c.ns}, &ns)) {
			c.outcome = "deleted at once"
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	msg := findEvent(c.ns, "DeleteFailed")
	if msg != "" {
		c.messages = append(c.messages, msg)
		c.outcome = "held by the finalizer: " + excerpt(msg, c.fault)
		return
	}
	c.outcome = "held by the finalizer (deletion in flight)"
}

func opPass(c *cell) {
	c.install()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	start := time.Now()
	res, err := env.Controller.Pass(ctx)
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		c.messages = append(c.messages, err.Error())
		c.outcome = fmt.Sprintf("pass failed in %s: %s", took, excerpt(err.Error(), c.fault))
		return
	}
	c.outcome = fmt.Sprintf("pass OK in %s (rebound %d, bound %d)", took, res.Rebound, res.Bound)
}

// --- after the fault is cleared and a pass ran ---------------------------------

func afterBound(c *cell) {
	if !nsExists(c.ns) {
		c.problem("namespace %s is gone", c.ns)
		return
	}
	deadline := time.Now().Add(15 * time.Second)
	for getNamespace(c.t, c.ns).Labels[queueLabel] == "" {
		if time.Now().After(deadline) {
			c.problem("namespace %s still unbound after the fault was cleared and a pass ran", c.ns)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c.op.short == "pod" {
		// The first pod binds once Run:ai answers again.
		_, stderr, err := env.Kubectl(ctxT(c.t, 60*time.Second), podYAML(c.ns, "after", "notebook", 0, nil, ""), "create", "-f", "-")
		if err != nil {
			c.problem("a pod after the fault was refused: %s", refusal(stderr))
		}
	}
}

// afterQuota: with Run:ai back, the quota is enforced again: the second
// notebook fits, the third does not.
func afterQuota(c *cell) {
	if _, stderr, err := env.Kubectl(ctxT(c.t, 60*time.Second), podYAML(c.ns, "nb-2", "notebook", 1, nil, ""), "create", "-f", "-"); err != nil {
		c.problem("second 1-GPU notebook refused with Run:ai back: %s", refusal(stderr))
	}
	_, stderr, err := env.Kubectl(ctxT(c.t, 60*time.Second), podYAML(c.ns, "nb-3", "notebook", 1, nil, ""), "create", "-f", "-")
	switch {
	case err == nil:
		c.problem("third 1-GPU notebook admitted in a 2-GPU project")
	case !strings.Contains(stderr, "has 0 of 2 GPUs left"):
		c.problem("third notebook refused for another reason: %s", refusal(stderr))
	}
}

func afterMove(c *cell) {
	ns := getNamespace(c.t, c.ns)
	p, ok := env.Sim.ProjectByName(c.ns)
	if !ok {
		c.problem("no Run:ai project %s after the move and a pass", c.ns)
		return
	}
	if c.moveRefuse {
		if ns.Labels[deptLabel] != "" {
			c.problem("a refused move changed the label to %q", ns.Labels[deptLabel])
		}
		if got, want := deptName(p.ParentID), deptName(c.before.ParentID); got != want {
			c.problem("a refused move left project %s in department %s, not its old %s", p.Name, got, want)
		}
		if got, want := deserved(p), deserved(c.before); got != want {
			if strings.Contains(strings.Join(c.messages, " "), "failed too") {
				// Both creates failed (the new department's and the
				// restore's): nothing kept the old settings, and the pass
				// bound the namespace again with the defaults.
				c.knownIssue("a move whose restore failed too lost the project's quota: %s has %g deserved GPUs after the pass, not its old %g (the old settings are kept nowhere)", p.Name, got, want)
			} else {
				c.problem("a refused move left project %s with %g deserved GPUs, not its old %g", p.Name, got, want)
			}
		}
		return
	}
	if ns.Labels[deptLabel] != "research" || deptName(p.ParentID) != "research" {
		c.problem("an admitted move: label %q, project in %s", ns.Labels[deptLabel], deptName(p.ParentID))
	}
}

func afterDelete(c *cell) {
	deadline := time.Now().Add(60 * time.Second)
	for nsExists(c.ns) {
		if time.Now().After(deadline) {
			c.problem("namespace %s not deleted within 60s of Run:ai coming back", c.ns)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range env.Sim.Projects() {
		if p.BoundNamespace() == c.ns && p.Status.Phase != runai.PhaseDeleting {
			c.problem("Run:ai project %s (%s) outlived its namespace", p.Name, p.ID)
		}
	}
}

func nsExists(name string) bool {
	var ns corev1.Namespace
	return !apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &ns))
}

// --- messages -------------------------------------------------------------------

var deniedRE = regexp.MustCompile(`(?s)denied the request: (.*)`)

// refusal is the webhook's message out of kubectl's stderr (all of it
// when the webhook did not answer: a timeout, a connection error).
func refusal(stderr string) string {
	s := strings.TrimSpace(stderr)
	if m := deniedRE.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	return strings.Join(strings.Fields(s), " ")
}

// warnings are kubectl's "Warning: ..." lines.
func warnings(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if w, ok := strings.CutPrefix(strings.TrimSpace(l), "Warning: "); ok {
			out = append(out, w)
		}
	}
	return out
}

// warningsNote records the Run:ai warnings of an admission and says so.
func warningsNote(c *cell, stderr string) string {
	var ws []string
	for _, w := range warnings(stderr) {
		if strings.Contains(w, "not checked") || strings.Contains(w, "could not") {
			c.messages = append(c.messages, w)
			ws = append(ws, excerpt(w, c.fault))
		}
	}
	if len(ws) == 0 {
		return ""
	}
	return " with warning: " + strings.Join(ws, "; ")
}

// excerpt is the start of msg and, when present, the fault's effect in it.
func excerpt(msg string, f matrixFault) string {
	head := msg
	if len(head) > 48 {
		head = head[:48] + "…"
	}
	for _, e := range f.effects {
		if strings.Contains(msg, e) {
			return fmt.Sprintf("%q … %q", head, e)
		}
	}
	return fmt.Sprintf("%q", head)
}

// checkMessage: a message the fault caused names Run:ai and the effect.
func (c *cell) checkMessage(msg string) {
	if !strings.Contains(msg, "Run:ai") {
		c.problem("message does not name Run:ai: %s", msg)
	}
	for _, e := range c.fault.effects {
		if strings.Contains(msg, e) {
			return
		}
	}
	c.problem("message names none of the fault's effects %q: %s", c.fault.effects, msg)
}

// --- the run ---------------------------------------------------------------------

func newMatrix(t *testing.T, prefix string) *matrix {
	m := &matrix{t: t, prefix: prefix}
	t.Cleanup(func() { _ = clearRunAIFaults() })
	// One adopted project per run: never deleted or moved, whatever fails.
	adoptedNS := prefix + "adopted"
	env.Sim.AddProject(runaitest.ProjectSeed{Name: strings.TrimSuffix(prefix, "-") + "-legacy", Department: "vision", Namespace: adoptedNS, DeservedGPUs: 1})
	createManaged(t, adoptedNS, "vision")
	waitBound(t, adoptedNS, 30*time.Second)
	var ok bool
	m.adopted, ok = env.Sim.ProjectByName(strings.TrimSuffix(prefix, "-") + "-legacy")
	require.True(t, ok)
	t.Cleanup(func() { m.finish() })
	return m
}

// run plays one cell and checks the invariants after it.
func (m *matrix) run(op matrixOp, f matrixFault) {
	t := m.t
	c := &cell{t: t, m: m, op: op, fault: f, ns: m.prefix + op.short + "-" + f.short}
	m.rows = append(m.rows, c)
	start := time.Now()
	ok := t.Run(op.short+"/"+f.short, func(t *testing.T) {
		c.t, c.ran = t, true
		defer func() { _ = clearRunAIFaults() }()
		op.prepare(c)
		op.run(c)
		require.NoError(t, clearRunAIFaults())
		if err := passAfterFault(t); err != nil {
			c.problem("the pass after the fault failed: %v", err)
		}
		op.after(c)
		for _, msg := range c.messages {
			c.checkMessage(msg)
		}
		c.problems = append(c.problems, m.invariants()...)
		for _, p := range c.problems {
			t.Errorf("%s × %s: %s", op.name, f.name, p)
		}
	})
	c.took = time.Since(start)
	if !c.ran {
		m.rows = m.rows[:len(m.rows)-1] // filtered out by -run
		return
	}
	if !ok && len(c.problems) == 0 {
		c.problem("the cell failed (see its log)")
	}
	if c.outcome == "" {
		c.outcome = "(not reached)"
	}
	// Keep the shared test bed small; deletion finishes in the background.
	if op.short != "delete" {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}})
	}
	t.Logf("matrix: %-18s × %-21s → %s | invariants: %s (%s)", op.name, f.name, c.outcome, c.verdict(), c.took.Round(100*time.Millisecond))
}

func (c *cell) verdict() string {
	if len(c.problems) == 0 {
		if len(c.known) > 0 {
			return "OK except KNOWN LIMITATION: " + strings.Join(c.known, "; ")
		}
		return "OK"
	}
	return fmt.Sprintf("%d broken: %s", len(c.problems), strings.Join(c.problems, "; "))
}

// passAfterFault runs one pass; a failure of namespaces outside the matrix
// (other tests' leftovers) is not ours, so it is retried once and reported.
func passAfterFault(t *testing.T) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := env.Controller.Pass(ctx)
	if err == nil {
		return nil
	}
	t.Logf("pass after the fault: %v; retrying once", err)
	time.Sleep(2 * time.Second)
	_, err = env.Controller.Pass(ctx)
	return err
}

// invariants checks the matrix's namespaces, projects and pods.
func (m *matrix) invariants() []string {
	var bad []string
	ctx := context.Background()
	var nss corev1.NamespaceList
	if err := env.Client.List(ctx, &nss); err != nil {
		return []string{"listing namespaces: " + err.Error()}
	}
	projects := env.Sim.Projects()
	byNS := map[string][]runai.Project{}
	for _, p := range projects {
		if p.Status.Phase == runai.PhaseDeleting {
			continue
		}
		byNS[p.BoundNamespace()] = append(byNS[p.BoundNamespace()], p)
	}
	live := map[string]*corev1.Namespace{}
	for i := range nss.Items {
		ns := &nss.Items[i]
		if !strings.HasPrefix(ns.Name, m.prefix) {
			continue
		}
		live[ns.Name] = ns
		if ns.DeletionTimestamp != nil {
			if len(byNS[ns.Name]) > 1 {
				bad = append(bad, fmt.Sprintf("terminating namespace %s has %d Run:ai projects", ns.Name, len(byNS[ns.Name])))
			}
			continue
		}
		queue := ns.Labels[queueLabel]
		ps := byNS[ns.Name]
		switch {
		case queue == "":
			bad = append(bad, fmt.Sprintf("namespace %s is not bound after the pass", ns.Name))
			continue
		case len(ps) != 1:
			names := []string{}
			for _, p := range ps {
				names = append(names, p.Name+"/"+p.ID)
			}
			bad = append(bad, fmt.Sprintf("bound namespace %s has %d Run:ai projects %v", ns.Name, len(ps), names))
			continue
		case ps[0].Name != queue:
			bad = append(bad, fmt.Sprintf("namespace %s is queued in %s but bound to Run:ai project %s", ns.Name, queue, ps[0].Name))
		}
		p := ps[0]
		owned := bind.CreatedByUs(p, ns.Name)
		switch id := ns.Labels[idLabel]; {
		case owned && id != p.ID:
			bad = append(bad, fmt.Sprintf("namespace %s: project %s is ours (id %s) but the ownership label says %q", ns.Name, p.Name, p.ID, id))
		case !owned && id != "":
			bad = append(bad, fmt.Sprintf("namespace %s: adopted project %s carries the ownership label %s", ns.Name, p.Name, id))
		}
		bad = append(bad, podInvariants(ns.Name, queue, deserved(p))...)
	}
	for _, p := range projects {
		ns := p.BoundNamespace()
		if !strings.HasPrefix(ns, m.prefix) || !bind.CreatedByUs(p, ns) || p.Status.Phase == runai.PhaseDeleting {
			continue
		}
		if live[ns] == nil {
			bad = append(bad, fmt.Sprintf("Run:ai project %s (%s) of ours outlived namespace %s", p.Name, p.ID, ns))
		}
	}
	if a, ok := env.Sim.ProjectByName(m.adopted.Name); !ok {
		bad = append(bad, "the adopted project "+m.adopted.Name+" was deleted")
	} else if a.ID != m.adopted.ID || a.ParentID != m.adopted.ParentID || deserved(a) != deserved(m.adopted) {
		bad = append(bad, fmt.Sprintf("the adopted project %s changed: id %s→%s, department %s→%s, deserved %g→%g",
			a.Name, m.adopted.ID, a.ID, deptName(m.adopted.ParentID), deptName(a.ParentID), deserved(m.adopted), deserved(a)))
	}
	return bad
}

// podInvariants: every pod of a bound namespace is in its queue, a GPU pod
// on Run:ai's scheduler, and the GPU notebooks fit in the deserved GPUs.
func podInvariants(ns, queue string, deservedGPUs float64) []string {
	var bad []string
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		return []string{"listing pods of " + ns + ": " + err.Error()}
	}
	notebookGPUs := 0.0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if q := p.Labels[queueLabel]; q != queue {
			bad = append(bad, fmt.Sprintf("pod %s/%s admitted with queue %q in namespace queued in %s", ns, p.Name, q, queue))
		}
		v := workload.FromCore(p)
		g, err := v.GPURequest()
		if err == nil && g.Any() {
			if p.Spec.SchedulerName != "runai-scheduler" {
				bad = append(bad, fmt.Sprintf("GPU pod %s/%s admitted with scheduler %q", ns, p.Name, p.Spec.SchedulerName))
			}
			if v.NonPreemptible() {
				notebookGPUs += g.Total()
			}
		}
	}
	if deservedGPUs >= 0 && notebookGPUs > deservedGPUs+1e-9 {
		bad = append(bad, fmt.Sprintf("namespace %s holds %g GPUs of notebooks over %g deserved", ns, notebookGPUs, deservedGPUs))
	}
	return bad
}

// finish deletes the adopted namespace, waits for every namespace of the
// run to go, checks that nothing leaked in Run:ai, and prints the table.
func (m *matrix) finish() {
	t := m.t
	_ = clearRunAIFaults()
	ctx := context.Background()
	_ = env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.prefix + "adopted"}})
	var leftover []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		leftover = leftover[:0]
		var nss corev1.NamespaceList
		_ = env.Client.List(ctx, &nss)
		for _, ns := range nss.Items {
			if strings.HasPrefix(ns.Name, m.prefix) {
				leftover = append(leftover, ns.Name)
			}
		}
		if len(leftover) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var leaked []string
	for _, p := range env.Sim.Projects() {
		if ns := p.BoundNamespace(); strings.HasPrefix(ns, m.prefix) && bind.CreatedByUs(p, ns) {
			leaked = append(leaked, p.Name)
		}
	}
	_, adoptedKept := env.Sim.ProjectByName(m.adopted.Name)

	var b strings.Builder
	fmt.Fprintf(&b, "matrix: %d cells (operation × fault → outcome | invariants)\n", len(m.rows))
	rows := append([]*cell(nil), m.rows...)
	opIndex := func(c *cell) int {
		for i, o := range matrixOps {
			if o.short == c.op.short {
				return i
			}
		}
		return len(matrixOps)
	}
	sort.SliceStable(rows, func(i, j int) bool { return opIndex(rows[i]) < opIndex(rows[j]) })
	for _, c := range rows {
		fmt.Fprintf(&b, "matrix: %-18s | %-21s | %s | %s\n", c.op.name, c.fault.name, c.outcome, c.verdict())
	}
	fmt.Fprintf(&b, "matrix: after the run: %d namespace(s) left %v, %d project(s) of ours leaked %v, adopted project %s kept: %v",
		len(leftover), leftover, len(leaked), leaked, m.adopted.Name, adoptedKept)
	t.Log(b.String())
	if len(leftover) > 0 {
		t.Errorf("namespaces not deleted 90s after the run: %v", leftover)
	}
	if len(leaked) > 0 {
		t.Errorf("Run:ai projects of ours leaked after their namespaces were deleted: %v", leaked)
	}
	if !adoptedKept {
		t.Errorf("the adopted project %s was deleted with its namespace", m.adopted.Name)
	}
}

// TestFaultMatrix is the part of the matrix `make test` runs: every fault
// against the first pod and the quota check, and Run:ai down against every
// operation (plus the lost answer of a create, the classic "did my create
// happen?").
func TestFaultMatrix(t *testing.T) {
	skipWithoutSimulator(t)
	m := newMatrix(t, "e2e-fm-")
	for _, f := range matrixFaults {
		m.run(opByName("pod"), f)
		m.run(opByName("quota"), f)
	}
	for _, op := range []string{"create", "move", "delete", "pass"} {
		m.run(opByName(op), faultByName("down"))
	}
	m.run(opByName("create"), faultByName("partial"))
}
