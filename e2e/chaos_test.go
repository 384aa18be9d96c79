//go:build chaos

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// The chaos test runs the webhook as the chart does: two `serve` replicas
// (separate processes of the real binary) behind a load balancer, and one
// leader-elected `reconcile` process, against a control plane of its own.
// While 500 pods are created across 50 namespaces (10 of them unbound when
// the load starts), one replica is SIGKILLed (and restarted 5s later, as
// kubelet would) and kube-apiserver is restarted. Afterwards every
// namespace is bound to exactly one Run:ai project, every pod admitted in
// it is in its queue on Run:ai's scheduler, no namespace holds more GPU
// notebooks than its quota, and every error a client saw was a refusal or
// retriable (5xx, timeout, connection error).

// proc is one webhook process, restarted like a container when it exits
// unless it is being stopped.
type proc struct {
	t        *testing.T
	name     string
	bin      string
	args     []string
	env      []string
	log      string
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	stopping bool
	restarts int
	exits    []string
	// restartDelay after an exit, as a container's restart back-off.
	restartDelay time.Duration
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		close(done)
		p.mu.Lock()
		stopping := p.stopping
		p.exits = append(p.exits, fmt.Sprintf("pid %d: %v", cmd.Process.Pid, err))
		p.mu.Unlock()
		if stopping {
			return
		}
		time.Sleep(p.restartDelay)
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		p.restarts++
		p.mu.Unlock()
		if err := p.start(); err != nil {
			p.t.Logf("chaos: restarting %s: %v", p.name, err)
		}
	}()
	return nil
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// kill SIGKILLs the current process by its PID (it is restarted).
func (p *proc) kill() int {
	pid := p.pid()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return pid
}

// stop ends the process for good: SIGTERM by PID, SIGKILL after 10s.
func (p *proc) stop() {
	p.mu.Lock()
	p.stopping = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// balancer is a TCP load balancer: connections alternate between the
// backends; a backend that refuses the connection is skipped.
type balancer struct {
	ln        net.Listener
	backends  []string
	next      atomic.Uint64
	conns     atomic.Int64
	failovers atomic.Int64
	dropped   atomic.Int64
	perBack   []atomic.Int64 // connections served by each backend
	mu        sync.Mutex
	open      map[net.Conn]bool
}

func newBalancer(backends ...string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends, open: map[net.Conn]bool{}, perBack: make([]atomic.Int64, len(backends))}
	go b.serve()
	return b, nil
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) track(c net.Conn, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.open[c] = true
	} else {
		delete(b.open, c)
	}
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.conns.Add(1)
		go b.handle(c)
	}
}

func (b *balancer) handle(c net.Conn) {
	b.track(c, true)
	defer b.track(c, false)
	defer c.Close()
	first := int(b.next.Add(1))
	var up net.Conn
	for i := range b.backends {
		k := (first + i) % len(b.backends)
		u, err := net.DialTimeout("tcp", b.backends[k], time.Second)
		if err == nil {
			up = u
			b.perBack[k].Add(1)
			if i > 0 {
				b.failovers.Add(1)
			}
			break
		}
	}
	if up == nil {
		b.dropped.Add(1)
		return
	}
	b.track(up, true)
	defer b.track(up, false)
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
}

func (b *balancer) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.open {
		_ = c.Close()
	}
}

// podJob is one pod of the load.
type podJob struct {
	ns, name, typ string
	gpus          int64
	quotaGroup    bool // one of 3 concurrent GPU notebooks in a 2-GPU project
}

// outcome of one pod create, after retries.
type podOutcome struct {
	job      podJob
	created  bool
	refusal  string // final refusal message
	attempts int
	errs     []string // every error seen, classified "kind: message"
}

// classify says what a client error was: a refusal by a webhook (final, or
// one that says to retry), or retriable (5xx, timeout, connection), or
// unexpected.
func classify(err error) (kind string, retry bool) {
	msg := err.Error()
	var se apierrors.APIStatus
	status := 0
	if errors.As(err, &se) {
		status = int(se.Status().Code)
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return "already-exists", false
	case refusedByUs(msg):
		// Our refusals that say a retry works: Run:ai not answering for a
		// first pod, or the inject webhook missed (its policy is Ignore).
		if strings.Contains(msg, "Retry later") || strings.Contains(msg, "retry the create") {
			return "refusal-retry", true
		}
		return "refusal", false
	case status >= 500, apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		strings.Contains(msg, "failed calling webhook"):
		return fmt.Sprintf("retriable-%d", status), true
	case isConnErr(err):
		return "retriable-connection", true
	}
	return "unexpected", false
}

func isConnErr(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "EOF", "broken pipe", "http2: ", "i/o timeout", "TLS handshake", "context deadline exceeded", "client rate limiter"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

func freeLocalPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestChaosTwoReplicasUnderLoad(t *testing.T) {
	if framework.UseExistingCluster() {
		t.Skip("starts its own control plane")
	}
	logf := func(format string, a ...any) { t.Logf("chaos: "+format, a...) }
	ctx := context.Background()
	start := time.Now()
	ce, err := framework.Start(ctx, framework.Options{
		Seed:                Seed(),
		Configure:           func(c *config.Config) { c.ProjectGPUQuota = 2; c.BindTimeout = 5 * time.Second },
		Log:                 os.Stderr,
		NoControllerManager: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := ce.Stop(); err != nil {
			t.Errorf("stopping the chaos control plane: %v", err)
		}
	})
	require.NoError(t, ce.StopWebhook(), "stopping the in-process webhook")
	logf("control plane up in %s; in-process webhook stopped", time.Since(start).Round(time.Second))

	bin := buildCLI(t)
	dir := t.TempDir()
	kc, err := ce.UserKubeconfig(framework.WebhookUser, "system:serviceaccounts", "system:serviceaccounts:"+framework.ReleaseNamespace)
	require.NoError(t, err)
	secret := filepath.Join(dir, "client-secret")
	require.NoError(t, os.WriteFile(secret, []byte(framework.ClientSecret), 0o600))
	procEnv := append(os.Environ(),
		"RUN_AI_ENABLE=true", "RUN_AI_URL="+ce.Sim.URL(), "RUN_AI_CLIENT_ID="+framework.ClientID,
		"RUN_AI_CLIENT_SECRET_FILE="+secret, "WEBHOOK_USER="+framework.WebhookUser,
		"RUN_AI_PROJECT_GPU_QUOTA=2", "BIND_TIMEOUT=5s", "RUN_AI_RECONCILE_INTERVAL_S=10",
		"POD_NAMESPACE="+framework.ReleaseNamespace)
	type replica struct {
		*proc
		port, health int
	}
	var replicas []*replica
	for _, name := range []string{"replica-a", "replica-b"} {
		port, health := freeLocalPort(t), freeLocalPort(t)
		replicas = append(replicas, &replica{proc: &proc{t: t, name: name, bin: bin, env: procEnv, log: filepath.Join(dir, name+".log"), restartDelay: 5 * time.Second,
			args: []string{"serve", "--kubeconfig", kc, "--webhook-host", "127.0.0.1", "--webhook-port", strconv.Itoa(port),
				"--cert-dir", ce.CertDir, "--metrics-addr", "0", "--health-addr", "127.0.0.1:" + strconv.Itoa(health)}}, port: port, health: health})
	}
	reconciler := &proc{t: t, name: "reconcile", bin: bin, env: procEnv, log: filepath.Join(dir, "reconcile.log"), restartDelay: 2 * time.Second,
		args: []string{"reconcile", "--kubeconfig", kc, "--leader-elect=true", "--leader-election-namespace", framework.ReleaseNamespace,
			"--metrics-addr", "0", "--health-addr", "0"}}
	all := []*proc{replicas[0].proc, replicas[1].proc, reconciler}
	for _, p := range all {
		require.NoError(t, p.start(), p.name)
	}
	var lb *balancer
	t.Cleanup(func() {
		for _, p := range all {
			p.stop()
		}
		if lb != nil {
			lb.close()
		}
		if t.Failed() {
			for _, p := range all {
				if b, err := os.ReadFile(p.log); err == nil {
					lines := strings.Split(strings.TrimSpace(string(b)), "\n")
					t.Logf("chaos: last lines of %s:\n%s", p.name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
				}
			}
		}
	})
	for _, r := range replicas {
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(r.health) + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 90*time.Second, 200*time.Millisecond, "%s ready", r.name)
	}
	lb, err = newBalancer("127.0.0.1:"+strconv.Itoa(replicas[0].port), "127.0.0.1:"+strconv.Itoa(replicas[1].port))
	require.NoError(t, err)
	ca, err := ce.CA()
	require.NoError(t, err)
	require.NoError(t, ce.InstallWebhookConfigurationsAt(ctx, "https://"+lb.addr(), ca))
	require.Eventually(t, func() bool {
		probe := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chaos-probe", Labels: map[string]string{projectLabel: "p", queueLabel: "spoofed"}}}
		err := ce.Client.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "written only by runai-webhook")
	}, 60*time.Second, 200*time.Millisecond, "the API server calls the replicas through the balancer")
	logf("2 serve replicas (pids %d, %d) behind the balancer on %s, reconcile pid %d", replicas[0].pid(), replicas[1].pid(), lb.addr(), reconciler.pid())

	// 40 namespaces bound by the reconcile process, 10 created while Run:ai
	// is down (unbound when the load starts).
	var bound, unbound []string
	for i := range 40 {
		bound = append(bound, fmt.Sprintf("chaos-b-%02d", i))
	}
	for i := range 10 {
		unbound = append(unbound, fmt.Sprintf("chaos-u-%02d", i))
	}
	mkns := func(name string) {
		require.NoError(t, ce.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{projectLabel: name}}}))
	}
	for _, ns := range bound {
		mkns(ns)
	}
	getNS := func(name string) *corev1.Namespace {
		var ns corev1.Namespace
		if err := ce.Client.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
			return nil
		}
		return &ns
	}
	require.Eventually(t, func() bool {
		for _, ns := range bound {
			if n := getNS(ns); n == nil || n.Labels[queueLabel] == "" {
				return false
			}
		}
		return true
	}, 120*time.Second, 500*time.Millisecond, "the reconcile process (once leader) binds the 40 namespaces")
	var lease coordinationv1.Lease
	_ = ce.Client.Get(ctx, client.ObjectKey{Namespace: framework.ReleaseNamespace, Name: "runai-webhook-reconcile"}, &lease)
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	logf("40 namespaces bound by the reconcile leader %q", holder)
	require.NoError(t, ce.Sim.SetDown(true))
	for _, ns := range unbound {
		mkns(ns)
	}
	time.Sleep(2 * time.Second) // the controller tries and fails
	require.NoError(t, ce.Sim.SetDown(false))
	stillUnbound := 0
	for _, ns := range unbound {
		if n := getNS(ns); n != nil && n.Labels[queueLabel] == "" {
			stillUnbound++
		}
	}
	logf("10 namespaces created while Run:ai was down; %d still unbound as the load starts", stillUnbound)

	// The load: 10 pods per namespace. In 10 namespaces (3 of them unbound),
	// 3 one-GPU notebooks in a 2-GPU project, submitted together.
	quotaNS := map[string]bool{}
	for _, ns := range append(append([]string{}, unbound[:3]...), bound[:7]...) {
		quotaNS[ns] = true
	}
	var jobs []podJob
	var quotaGroups [][]podJob
	for i, ns := range append(append([]string{}, unbound...), bound...) {
		n := 0
		if quotaNS[ns] {
			var g []podJob
			for k := range 3 {
				g = append(g, podJob{ns: ns, name: fmt.Sprintf("nb-gpu-%d", k), typ: "notebook", gpus: 1, quotaGroup: true})
			}
			quotaGroups = append(quotaGroups, g)
			n = 3
		}
		for k := n; k < 10; k++ {
			j := podJob{ns: ns, name: fmt.Sprintf("p-%d", k), typ: "job"}
			switch (i + k) % 5 {
			case 1:
				j.typ = "notebook"
			case 2:
				j.gpus = 1 // a GPU job: never quota-checked
			case 3:
				j.typ = "ray"
			}
			jobs = append(jobs, j)
		}
	}
	// Spread the notebook groups through the run (before the kill, between
	// it and the restart, and after).
	var load [][]podJob
	step := len(jobs) / (len(quotaGroups) + 1)
	for i, j := range jobs {
		if step > 0 && i%step == 0 && i/step < len(quotaGroups) {
			load = append(load, quotaGroups[i/step])
		}
		load = append(load, []podJob{j})
	}
	total := 0
	for _, g := range load {
		total += len(g)
	}
	require.Equal(t, 500, total)

	var (
		mu            sync.Mutex
		outcomes      []*podOutcome
		doneN         atomic.Int64
		restartFailed = make(chan struct{})
	)
	create := func(j podJob) *podOutcome {
		o := &podOutcome{job: j}
		pod := corePod(j.ns, j.name, j.typ, j.gpus)
		backoff := 500 * time.Millisecond
		for o.attempts < 12 {
			select {
			case <-restartFailed:
				o.errs = append(o.errs, "unexpected: kube-apiserver did not come back")
				return o
			default:
			}
			o.attempts++
			cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
			err := ce.Client.Create(cctx, pod.DeepCopy())
			cancel()
			if err == nil {
				o.created = true
				return o
			}
			kind, retry := classify(err)
			o.errs = append(o.errs, kind+": "+oneLine(err.Error(), 200))
			if kind == "already-exists" && o.attempts > 1 {
				o.created = true // an earlier attempt's answer was lost
				return o
			}
			if !retry {
				o.refusal = err.Error()
				return o
			}
			time.Sleep(backoff)
			backoff = min(backoff*2, 5*time.Second)
		}
		return o
	}
	work := make(chan []podJob)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				var gwg sync.WaitGroup
				res := make([]*podOutcome, len(g))
				for i, j := range g {
					gwg.Add(1)
					go func() { defer gwg.Done(); res[i] = create(j) }()
				}
				gwg.Wait()
				mu.Lock()
				outcomes = append(outcomes, res...)
				mu.Unlock()
				doneN.Add(int64(len(g)))
			}
		}()
	}
	var timeline []string
	note := func(format string, a ...any) {
		s := fmt.Sprintf("%6.1fs  %s", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
		mu.Lock()
		timeline = append(timeline, s)
		mu.Unlock()
	}
	loadStart := time.Now()
	note("load starts: 500 pods, 16 clients")
	chaosDone := make(chan error, 1)
	go func() {
		for doneN.Load() < 120 {
			time.Sleep(50 * time.Millisecond)
		}
		// The replica serving the API server's connection, if one does.
		victim := replicas[0]
		if lb.perBack[1].Load() > lb.perBack[0].Load() {
			victim = replicas[1]
		}
		pid := victim.kill()
		note("SIGKILL %s (pid %d) after %d pods; restarted by the supervisor 5s later", victim.name, pid, doneN.Load())
		logf("SIGKILL %s (pid %d)", victim.name, pid)
		killedAt := time.Now()
		for doneN.Load() < 300 || time.Since(killedAt) < 8*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
		note("kube-apiserver stopping after %d pods", doneN.Load())
		err := ce.RestartAPIServer(2 * time.Second)
		note("kube-apiserver back (err %v) after %d pods", err, doneN.Load())
		logf("kube-apiserver restarted: err %v", err)
		if err != nil {
			close(restartFailed)
		}
		chaosDone <- err
	}()
	// About 15 pods a second: the load lasts long enough for the kill, the
	// restarted replica's return and the API server restart to land in it.
	pace := time.NewTicker(60 * time.Millisecond)
	for _, g := range load {
		<-pace.C
		work <- g
	}
	pace.Stop()
	close(work)
	wg.Wait()
	note("load done: %d pods in %s", doneN.Load(), time.Since(loadStart).Round(time.Millisecond))
	select {
	case err := <-chaosDone:
		require.NoError(t, err, "restarting kube-apiserver")
	case <-time.After(3 * time.Minute):
		t.Fatal("the chaos steps did not finish")
	}

	// Settle: the reconcile pass (every 10s) binds what the load left unbound.
	all50 := append(append([]string{}, unbound...), bound...)
	settled := false
	settleStart := time.Now()
	for time.Since(settleStart) < 90*time.Second {
		ok := true
		for _, ns := range all50 {
			if n := getNS(ns); n == nil || n.Labels[queueLabel] == "" {
				ok = false
				break
			}
		}
		if ok {
			settled = true
			break
		}
		time.Sleep(time.Second)
	}
	note("every namespace bound: %v (after %s)", settled, time.Since(settleStart).Round(time.Second))

	// The API server talks HTTP/2 to the webhook and keeps its connection,
	// so the balancer rarely splits one namespace's creates between the
	// replicas. Probe it directly: the guard reviews of 3 one-GPU notebooks
	// of one fresh 2-GPU namespace, sent at once to both replicas (what an
	// HA control plane with several API servers does).
	crossReplica := probeCrossReplicaQuota(t, ce, replicas[0].port, replicas[1].port)

	// --- invariants ---
	type check struct {
		name string
		bad  []string
	}
	var checks []check
	add := func(name string, bad []string) { checks = append(checks, check{name, bad}) }

	projects := ce.Sim.Projects()
	byNS := map[string][]runai.Project{}
	for _, p := range projects {
		if p.Status.Phase != runai.PhaseDeleting {
			byNS[p.BoundNamespace()] = append(byNS[p.BoundNamespace()], p)
		}
	}
	var bad []string
	for _, ns := range all50 {
		n := getNS(ns)
		switch {
		case n == nil:
			bad = append(bad, ns+" missing")
		case n.Labels[queueLabel] == "":
			bad = append(bad, ns+" unbound")
		case len(byNS[ns]) != 1:
			bad = append(bad, fmt.Sprintf("%s has %d projects", ns, len(byNS[ns])))
		case byNS[ns][0].Name != n.Labels[queueLabel]:
			bad = append(bad, fmt.Sprintf("%s queued in %s, bound to %s", ns, n.Labels[queueLabel], byNS[ns][0].Name))
		case bind.CreatedByUs(byNS[ns][0], ns) && n.Labels[idLabel] != byNS[ns][0].ID:
			bad = append(bad, fmt.Sprintf("%s: ownership label %q, project id %s", ns, n.Labels[idLabel], byNS[ns][0].ID))
		}
	}
	add("one Run:ai project per bound namespace, named as its queue, ownership recorded", bad)
	bad = nil
	for _, p := range projects {
		ns := p.BoundNamespace()
		if strings.HasPrefix(ns, "chaos-") && bind.CreatedByUs(p, ns) && getNS(ns) == nil {
			bad = append(bad, p.Name+" without its namespace")
		}
	}
	add("every project of ours has its namespace", bad)

	created := map[string]bool{}
	for _, o := range outcomes {
		if o.created {
			created[o.job.ns+"/"+o.job.name] = true
		}
	}
	bad = nil
	var overQuota []string
	podsSeen := 0
	for _, ns := range all50 {
		n := getNS(ns)
		var pods corev1.PodList
		require.NoError(t, ce.Client.List(ctx, &pods, client.InNamespace(ns)))
		notebookGPUs := 0.0
		for i := range pods.Items {
			p := &pods.Items[i]
			podsSeen++
			if !created[ns+"/"+p.Name] {
				bad = append(bad, fmt.Sprintf("%s/%s exists but its create was reported failed", ns, p.Name))
			}
			if n != nil && p.Labels[queueLabel] != n.Labels[queueLabel] {
				bad = append(bad, fmt.Sprintf("%s/%s queue %q, namespace queue %q", ns, p.Name, p.Labels[queueLabel], n.Labels[queueLabel]))
			}
			if p.Spec.SchedulerName != "runai-scheduler" {
				bad = append(bad, fmt.Sprintf("%s/%s scheduler %q", ns, p.Name, p.Spec.SchedulerName))
			}
			v := workload.FromCore(p)
			if g, err := v.GPURequest(); err == nil && g.Any() && v.NonPreemptible() {
				notebookGPUs += g.Total()
			}
		}
		if notebookGPUs > 2 {
			overQuota = append(overQuota, fmt.Sprintf("%s holds %g GPUs of notebooks (quota 2)", ns, notebookGPUs))
		}
	}
	add(fmt.Sprintf("every created pod (%d) in its namespace's queue on runai-scheduler", podsSeen), bad)
	add("no namespace holds GPU notebooks over its 2-GPU quota", overQuota)

	kinds := map[string]int{}
	finals := map[string]int{}
	bad = nil
	refusedQuota := 0
	for _, o := range outcomes {
		for _, e := range o.errs {
			k, _, _ := strings.Cut(e, ": ")
			kinds[k]++
			if k == "unexpected" {
				bad = append(bad, fmt.Sprintf("%s/%s: %s", o.job.ns, o.job.name, e))
			}
		}
		switch {
		case o.created:
			finals["created"]++
		case o.refusal != "":
			reason := "other"
			switch {
			case strings.Contains(o.refusal, "GPUs left for notebooks"):
				reason = "over quota"
				if o.job.quotaGroup {
					refusedQuota++
				}
			case strings.Contains(o.refusal, "not bound to Run:ai"):
				reason = "not bound"
			}
			finals["refused: "+reason]++
			if reason == "other" {
				bad = append(bad, fmt.Sprintf("%s/%s refused: %s", o.job.ns, o.job.name, oneLine(o.refusal, 300)))
			}
		default:
			finals["gave up after retries"]++
			bad = append(bad, fmt.Sprintf("%s/%s gave up after %d attempts: %v", o.job.ns, o.job.name, o.attempts, o.errs))
		}
		if !o.quotaGroup() && !o.created {
			bad = append(bad, fmt.Sprintf("%s/%s (no quota at stake) not created: %s", o.job.ns, o.job.name, oneLine(o.refusal, 200)))
		}
	}
	add("every client error a refusal or retriable; every pod without quota at stake created", bad)

	// --- report ---
	var b strings.Builder
	b.WriteString("chaos: what was tried\n")
	for _, l := range timeline {
		b.WriteString("chaos:   " + l + "\n")
	}
	fmt.Fprintf(&b, "chaos: balancer: %d connections (replica-a %d, replica-b %d), %d failed over to the other replica, %d dropped (no replica)\n",
		lb.conns.Load(), lb.perBack[0].Load(), lb.perBack[1].Load(), lb.failovers.Load(), lb.dropped.Load())
	fmt.Fprintf(&b, "chaos: cross-replica quota probe: %s\n", crossReplica)
	for _, p := range all {
		p.mu.Lock()
		fmt.Fprintf(&b, "chaos: process %-10s restarts %d, exits %v\n", p.name, p.restarts, p.exits)
		p.mu.Unlock()
	}
	keys := make([]string, 0, len(finals))
	for k := range finals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "chaos: pods %-24s %d\n", k, finals[k])
	}
	keys = keys[:0]
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "chaos: client errors %-22s %d\n", k, kinds[k])
	}
	fmt.Fprintf(&b, "chaos: GPU notebooks: %d groups of 3 in 2-GPU projects, %d refused over quota (want %d)\n", len(quotaGroups), refusedQuota, len(quotaGroups))
	b.WriteString("chaos: what held\n")
	for _, c := range checks {
		verdict := "HELD"
		if len(c.bad) > 0 {
			verdict = fmt.Sprintf("BROKEN (%d): %s", len(c.bad), strings.Join(c.bad[:min(8, len(c.bad))], "; "))
		}
		fmt.Fprintf(&b, "chaos:   %-80s %s\n", c.name, verdict)
	}
	t.Log(b.String())
	for _, c := range checks {
		if len(c.bad) > 0 {
			t.Errorf("%s: %d broken, e.g. %s", c.name, len(c.bad), c.bad[0])
		}
	}
}

func (o *podOutcome) quotaGroup() bool { return o.job.quotaGroup }

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// TestChaosAPIServerRestart: kube-apiserver stops and starts again on the
// same port; every client and the in-process webhook carry on.
func TestChaosAPIServerRestart(t *testing.T) {
	if framework.UseExistingCluster() {
		t.Skip("starts its own control plane")
	}
	ctx := context.Background()
	ce, err := framework.Start(ctx, framework.Options{Seed: Seed(), Log: os.Stderr, NoControllerManager: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ce.Stop() })
	mk := func(name string) error {
		return ce.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	require.NoError(t, mk("restart-before"))
	kc, err := ce.UserKubeconfig("restart-user")
	require.NoError(t, err)
	require.NoError(t, ce.RestartAPIServer(time.Second))
	var last error
	require.Eventually(t, func() bool { last = mk("restart-after"); return last == nil }, 60*time.Second, 500*time.Millisecond,
		"the API server answers the old client again (last error: %v)", last)
	// A kubeconfig written before the restart still authenticates (same
	// client CA, same serving certificate).
	_, stderr, err := ce.KubectlAs(ctx, kc, "", "auth", "whoami")
	require.NoError(t, err, stderr)
	// The in-process webhook runs serve and reconcile in one manager with
	// leader election: an outage longer than the lease's renew deadline
	// ends it (its Lease could not be renewed). Reported, not asserted.
	t.Logf("chaos: in-process webhook still running after the restart: %v", ce.WebhookRunning())
}

// probeCrossReplicaQuota sends the guard reviews of three 1-GPU notebooks of
// a fresh namespace (quota 2) at once: two to one replica, one to the other.
// Each replica's quota tracker counts only what it admitted and what its pod
// cache saw; reviews are not pods, so nothing reaches the caches and the
// result shows whether the replicas share anything.
func probeCrossReplicaQuota(t *testing.T, ce *framework.Env, portA, portB int) string {
	t.Helper()
	ctx := context.Background()
	ns := "chaos-x-quota"
	require.NoError(t, ce.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{projectLabel: ns}}}))
	var got corev1.Namespace
	require.Eventually(t, func() bool {
		return ce.Client.Get(ctx, client.ObjectKey{Name: ns}, &got) == nil && got.Labels[queueLabel] != ""
	}, 60*time.Second, 200*time.Millisecond, "%s bound", ns)
	ca, err := ce.CA()
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	review := func(i int) []byte {
		uid := fmt.Sprintf("cross-%d", i)
		pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nb-%d","namespace":%q,"labels":{%q:"notebook",%q:%q},"annotations":{%q:%q}},`+
			`"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"main","image":"registry.invalid/x:1","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
			i, ns, typeLabel, queueLabel, got.Labels[queueLabel], mutate.ReservationAnnotation, uid)
		return fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,"kind":{"group":"","version":"v1","kind":"Pod"},`+
			`"resource":{"group":"","version":"v1","resource":"pods"},"name":"nb-%d","namespace":%q,"operation":"CREATE","userInfo":{"username":"chaos"},"object":%s}}`,
			uid, i, ns, pod)
	}
	ports := []int{portA, portB, portA}
	allowed := make([]bool, len(ports))
	errs := make([]error, len(ports))
	var wg sync.WaitGroup
	for i, port := range ports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Post("https://127.0.0.1:"+strconv.Itoa(port)+app.PathPodGuard, "application/json", bytes.NewReader(review(i)))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			var rv admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&rv); err != nil || rv.Response == nil {
				errs[i] = fmt.Errorf("HTTP %d: %v", resp.StatusCode, err)
				return
			}
			allowed[i] = rv.Response.Allowed
		}()
	}
	wg.Wait()
	n := 0
	for i := range ports {
		require.NoError(t, errs[i], "guard review %d", i)
		if allowed[i] {
			n++
		}
	}
	verdict := fmt.Sprintf("%d of 3 one-GPU notebooks admitted in a 2-GPU project (2 reviews to one replica, 1 to the other, at once)", n)
	if n > 2 {
		verdict += ": KNOWN LIMITATION, the quota tracker is per replica (reservations and the per-namespace lock are in memory), " +
			"so concurrent creates answered by different replicas (several API servers, or after a reconnect) can together exceed the quota until Run:ai's own accounting catches up"
		if os.Getenv("E2E_KNOWN_BUGS") == "fail" {
			t.Errorf("KNOWN BUG: %s", verdict)
		}
	}
	return verdict
}
