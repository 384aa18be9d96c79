package bind_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// TestBindMapsDepartment: a Hopsworks department goes to the Run:ai
// department of exactly that name, else to run_ai_default_department; a
// label that breaks the naming rule is refused before Run:ai is called;
// departments are never created.
func TestBindMapsDepartment(t *testing.T) {
	e := newEnv(t, envOpts{seed: runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}, {Name: "ml-ops"}}}})
	deptsBefore := len(e.sim.Departments())

	cases := []struct {
		name     string
		label    *string // nil: no department label
		wantDept string  // "" : refused
	}{
		{name: "exact name match", label: ptr("research"), wantDept: "research"},
		{name: "exact name match with dash", label: ptr("ml-ops"), wantDept: "ml-ops"},
		{name: "no Run:ai twin falls back to default", label: ptr("marketing"), wantDept: "default"},
		{name: "63 characters is valid, no twin", label: ptr(strings.Repeat("a", 63)), wantDept: "default"},
		{name: "starts with a digit is valid", label: ptr("1st-floor"), wantDept: "default"},
		{name: "absent label is the default department", wantDept: "default"},
		{name: "empty label is the default department", label: ptr(""), wantDept: "default"},
		{name: "explicit default", label: ptr("default"), wantDept: "default"},
		{name: "uppercase refused", label: ptr("Research")},
		{name: "underscore refused", label: ptr("a_b")},
		{name: "64 characters refused", label: ptr(strings.Repeat("a", 64))},
		{name: "leading dash refused", label: ptr("-research")},
		{name: "trailing dash refused", label: ptr("research-")},
		{name: "dot refused", label: ptr("r.d")},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			name := fmt.Sprintf("dept-case-%d", i)
			ns := managedNS(name)
			if tc.label != nil {
				ns.Labels[deptKey] = *tc.label
			}
			e.create(ns)
			e.sim.ResetCalls()

			out, err := e.binder.Bind(ctxT(t), name)
			if tc.wantDept == "" {
				var refusal *bind.Refusal
				require.ErrorAs(t, err, &refusal)
				assert.Contains(t, refusal.Message, "department naming rule")
				assert.Empty(t, nonTokenCalls(e.sim), "a bad label is refused without calling Run:ai")
				e.requireUnbound(name)
				assert.False(t, hasFinalizer(e.ns(name)))
				_, exists := e.sim.ProjectByName(name)
				assert.False(t, exists)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantDept, out.Department)
			p := e.requireOwned(name)
			assert.Equal(t, e.dept(tc.wantDept).ID, p.ParentID, "project created in department %s", tc.wantDept)
		})
	}
	e.t = t
	assert.Zero(t, e.sim.CountCalls(http.MethodPost, pathDepartments), "departments are never created")
	assert.Len(t, e.sim.Departments(), deptsBefore, "departments are never created")
	e.checkInvariants()
}

// TestBindRefusesMissingDefaultDepartment: when run_ai_default_department
// does not exist in Run:ai, a namespace that falls back to it is refused with
// a message naming the setting; a namespace whose department has a twin is
// still bound. Nothing is created, departments included.
func TestBindRefusesMissingDefaultDepartment(t *testing.T) {
	e := newEnv(t, envOpts{
		seed: runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}}},
		objects: []client.Object{
			managedNS("no-label"),
			managedNS("no-twin", deptKey, "marketing"),
			managedNS("twin", deptKey, "research"),
		},
	})
	e.binder.DefaultDepartment = "gpu-pool" // not in Run:ai

	for _, name := range []string{"no-label", "no-twin"} {
		_, err := e.binder.Bind(ctxT(t), name)
		var refusal *bind.Refusal
		require.ErrorAs(t, err, &refusal, name)
		assert.Contains(t, refusal.Message, "run_ai_default_department")
		assert.Contains(t, refusal.Message, `"gpu-pool"`)
		e.requireUnbound(name)
		assert.False(t, hasFinalizer(e.ns(name)), "%s: no finalizer for a bind that never creates", name)
	}
	assert.Zero(t, e.creates())

	out, err := e.binder.Bind(ctxT(t), "twin")
	require.NoError(t, err)
	assert.Equal(t, "research", out.Department)
	e.requireOwned("twin")

	assert.Zero(t, e.sim.CountCalls(http.MethodPost, pathDepartments), "departments are never created")
	_, created := e.sim.DepartmentByName("gpu-pool")
	assert.False(t, created)
}

// TestBindAdoptsBoundProject: a Run:ai project already bound to the
// namespace, whatever its name, is adopted: queue label, no project-id
// label, no finalizer, no create.
func TestBindAdoptsBoundProject(t *testing.T) {
	cases := []struct{ name, project, namespace, dept string }{
		{name: "other name", project: "legacy", namespace: "team-x", dept: "research"},
		{name: "namespace's name, made by an admin", project: "team-y", namespace: "team-y", dept: "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{
				seed: runaitest.Seed{
					Departments: []runaitest.DepartmentSeed{{Name: "research"}},
					Projects:    []runaitest.ProjectSeed{{Name: tc.project, Namespace: tc.namespace, Department: tc.dept, DeservedGPUs: 3}},
				},
				objects: []client.Object{managedNS(tc.namespace)},
			})
			out, err := e.binder.Bind(ctxT(t), tc.namespace)
			require.NoError(t, err)
			p := e.requireAdopted(tc.namespace, tc.project)
			assert.Equal(t, bind.Outcome{Namespace: tc.namespace, Project: tc.project, ProjectID: p.ID, Department: tc.dept, Adopted: true, Ready: true}, out)
			assert.Equal(t, "adopted", out.Verb())
			assert.False(t, hasFinalizer(e.ns(tc.namespace)), "nothing of ours to delete: no finalizer")
			assert.Zero(t, e.creates(), "adoption creates nothing")
			assert.Zero(t, e.sim.CountWrites())
			e.checkInvariants()
		})
	}
}

// TestBindCreatesOwnedProject: with no project bound, one is created named
// after the namespace, bound to it, in the mapped department, with the GPU
// quota on the default node pool and our marker; the namespace is labelled
// as owned and gets the finalizer. A second bind is a no-op.
func TestBindCreatesOwnedProject(t *testing.T) {
	e := newEnv(t, envOpts{
		seed:    runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}}},
		objects: []client.Object{managedNS("team-a", deptKey, "research")},
	})
	out, err := e.binder.Bind(ctxT(t), "team-a")
	require.NoError(t, err)

	p := e.requireOwned("team-a")
	assert.Equal(t, bind.Outcome{Namespace: "team-a", Project: "team-a", ProjectID: p.ID, Department: "research", Ready: true}, out)
	assert.Equal(t, "created", out.Verb())
	assert.Equal(t, "team-a", p.Name)
	require.NotNil(t, p.RequestedNamespace)
	assert.Equal(t, "team-a", *p.RequestedNamespace)
	assert.Equal(t, e.dept("research").ID, p.ParentID)
	assert.Equal(t, bind.OwnerMarker("team-a"), p.Description)
	require.Len(t, p.Resources, 1)
	require.NotNil(t, p.Resources[0].NodePool)
	assert.Equal(t, e.sim.DefaultNodePool().ID, p.Resources[0].NodePool.ID)
	assert.Equal(t, 2.0, p.Resources[0].DeservedGPU())
	assert.Equal(t, 1, e.creates())

	ns := e.ns("team-a")
	assert.Equal(t, map[string]string{projectKey: "team-a", deptKey: "research", queueKey: "team-a", idKey: p.ID}, ns.Labels)

	e.sim.ResetCalls()
	again, err := e.binder.Bind(ctxT(t), "team-a")
	require.NoError(t, err)
	assert.True(t, again.AlreadyBound)
	assert.Equal(t, p.ID, again.ProjectID)
	assert.False(t, again.Adopted)
	assert.Empty(t, e.sim.Calls(), "a bound namespace needs no Run:ai call")
	e.checkInvariants()
}

// TestBindOneKubernetesWrite: a bind reads the namespace once and writes it
// once (one strategic-merge patch), whether it creates, adopts or finds a
// project of ours cut before its patch. The finalizer comes with the labels
// exactly when the project is ours, and another controller's finalizer is
// kept.
func TestBindOneKubernetesWrite(t *testing.T) {
	const other = "example.com/other-controller"
	cases := []struct {
		name    string
		seed    []runaitest.ProjectSeed
		ours    bool // a project of ours exists already, as after a cut bind
		owned   bool
		creates int
	}{
		{name: "creates", owned: true, creates: 1},
		{name: "adopts", seed: []runaitest.ProjectSeed{{Name: "legacy", Namespace: "team-w"}}},
		{name: "finds ours", ours: true, owned: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var writes, patches, reads atomic.Int32
			ns := managedNS("team-w")
			ns.Finalizers = []string{other}
			e := newEnv(t, envOpts{seed: runaitest.Seed{Projects: tc.seed}, objects: []client.Object{ns}, funcs: &interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					writes.Add(1)
					if patch.Type() == types.StrategicMergePatchType {
						patches.Add(1)
					}
					return c.Patch(ctx, obj, patch, opts...)
				},
				Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					writes.Add(1)
					return c.Update(ctx, obj, opts...)
				},
			}})
			e.binder.Reader = interceptor.NewClient(e.k8s, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					reads.Add(1)
					return c.Get(ctx, key, obj, opts...)
				},
			})
			if tc.ours {
				ctx := ctxT(t)
				cluster, err := e.binder.Cluster(ctx)
				require.NoError(t, err)
				pool, err := e.binder.NodePool(ctx, cluster.UUID)
				require.NoError(t, err)
				_, err = e.binder.RunAI.CreateProject(ctx, bind.NewProjectRequest(cluster.UUID, e.dept("default").ID, "team-w", pool, 1))
				require.NoError(t, err)
			}
			e.sim.ResetCalls()

			out, err := e.binder.Bind(ctxT(t), "team-w")
			require.NoError(t, err)
			assert.Equal(t, !tc.owned, out.Adopted)
			assert.EqualValues(t, 1, reads.Load(), "one live read of the namespace")
			assert.EqualValues(t, 1, writes.Load(), "one Kubernetes write")
			assert.EqualValues(t, 1, patches.Load(), "a strategic-merge patch")
			assert.Equal(t, tc.creates, e.creates(), "POST %s", pathProjects)
			want := []string{other}
			if tc.owned {
				want = append(want, bind.Finalizer)
				e.requireOwned("team-w")
			}
			assert.ElementsMatch(t, want, e.ns("team-w").Finalizers)
			e.checkInvariants()
		})
	}
}

// TestBindWaitsForReady: a project Run:ai is still setting up is polled
// until Ready within ReadyTimeout; past it the namespace is bound anyway
// and the outcome says not ready.
func TestBindWaitsForReady(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("slow"), managedNS("slower")}})
	e.sim.SetCreateDelay(150 * time.Millisecond)
	out, err := e.binder.Bind(ctxT(t), "slow")
	require.NoError(t, err)
	assert.True(t, out.Ready)
	assert.Positive(t, e.sim.CountCalls(http.MethodGet, pathProjects+"/"), "polled GET /projects/{id}")

	e.sim.SetCreateDelay(time.Hour)
	e.binder.ReadyTimeout = 100 * time.Millisecond
	out, err = e.binder.Bind(ctxT(t), "slower")
	require.NoError(t, err)
	assert.False(t, out.Ready)
	assert.Equal(t, out.ProjectID, e.ns("slower").Labels[idKey], "bound even before Ready: pods wait in the queue")
}

// TestBindRefusesNameHeldByAnotherNamespace: a Run:ai project with the
// namespace's name bound to another namespace blocks the bind: adopting it
// would put the namespace in someone else's queue.
func TestBindRefusesNameHeldByAnotherNamespace(t *testing.T) {
	e := newEnv(t, envOpts{
		seed:    runaitest.Seed{Projects: []runaitest.ProjectSeed{{Name: "team-z", Namespace: "elsewhere"}}},
		objects: []client.Object{managedNS("team-z")},
	})
	for _, op := range []struct {
		name string
		fn   func(context.Context, string) (bind.Outcome, error)
	}{{"Preview", e.binder.Preview}, {"Bind", e.binder.Bind}} {
		_, err := op.fn(ctxT(t), "team-z")
		var refusal *bind.Refusal
		require.ErrorAs(t, err, &refusal, op.name)
		assert.Contains(t, refusal.Message, "elsewhere", op.name)
	}
	e.requireUnbound("team-z")
	assert.Zero(t, e.creates())
	assert.Equal(t, "elsewhere", e.project("team-z").BoundNamespace(), "the other binding is untouched")
}

// TestBindRefusesWhenOff: with run_ai_enable=false nothing calls Run:ai.
func TestBindRefusesWhenOff(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("team-off")}})
	e.binder.Enabled = false
	for _, fn := range []func(context.Context, string) (bind.Outcome, error){e.binder.Bind, e.binder.Preview} {
		_, err := fn(ctxT(t), "team-off")
		var refusal *bind.Refusal
		require.ErrorAs(t, err, &refusal)
		assert.Contains(t, refusal.Message, "run_ai_enable=false")
	}
	assert.Empty(t, e.sim.Calls())
}

// TestBindRefusesUnmanagedOrMissingNamespace: only Hopsworks namespaces are
// bound; a missing namespace is refused, not created.
func TestBindRefusesUnmanagedOrMissingNamespace(t *testing.T) {
	plain := managedNS("plain")
	delete(plain.Labels, projectKey)
	e := newEnv(t, envOpts{objects: []client.Object{plain}})
	for _, name := range []string{"plain", "missing"} {
		_, err := e.binder.Bind(ctxT(t), name)
		var refusal *bind.Refusal
		require.ErrorAs(t, err, &refusal, name)
	}
	assert.Empty(t, nonTokenCalls(e.sim))
}

// TestPreviewWritesNothing: Preview says what Bind would do (create in the
// mapped department, adopt, already bound) with no write anywhere.
func TestPreviewWritesNothing(t *testing.T) {
	var k8sWrites sync.Map
	countWrites := interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			k8sWrites.Store(obj.GetName(), true)
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
	e := newEnv(t, envOpts{
		seed: runaitest.Seed{
			Departments: []runaitest.DepartmentSeed{{Name: "research"}},
			Projects:    []runaitest.ProjectSeed{{Name: "legacy", Namespace: "team-x", Department: "research"}},
		},
		objects: []client.Object{managedNS("team-new", deptKey, "research"), managedNS("team-x"), managedNS("team-bound", queueKey, "q", idKey, "42")},
		funcs:   &countWrites,
	})
	out, err := e.binder.Preview(ctxT(t), "team-new")
	require.NoError(t, err)
	assert.Equal(t, bind.Outcome{Namespace: "team-new", Project: "team-new", Department: "research"}, out)

	out, err = e.binder.Preview(ctxT(t), "team-x")
	require.NoError(t, err)
	assert.Equal(t, "legacy", out.Project)
	assert.True(t, out.Adopted)
	assert.Equal(t, "research", out.Department, "Outcome.Department is the department's name, not its id")

	out, err = e.binder.Preview(ctxT(t), "team-bound")
	require.NoError(t, err)
	assert.Equal(t, bind.Outcome{Namespace: "team-bound", Project: "q", ProjectID: "42", AlreadyBound: true, Ready: true}, out)

	assert.Zero(t, e.sim.CountWrites())
	k8sWrites.Range(func(k, _ any) bool { t.Errorf("Preview patched namespace %v", k); return true })
	e.requireUnbound("team-new")
	e.requireUnbound("team-x")
}

// TestBindConcurrentCallsCreateOnce: 50 concurrent binds of one namespace
// in one replica make exactly one create.
func TestBindConcurrentCallsCreateOnce(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("busy")}})
	e.sim.SetLatency(5 * time.Millisecond) // keep the first bind in flight while the others arrive

	const n = 50
	outs := make([]bind.Outcome, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			outs[i], errs[i] = e.binder.Bind(ctxT(t), "busy")
		})
	}
	close(start)
	wg.Wait()

	for i := range n {
		require.NoError(t, errs[i], "call %d", i)
		assert.Equal(t, outs[0].ProjectID, outs[i].ProjectID, "call %d", i)
		assert.False(t, outs[i].Adopted, "call %d", i)
	}
	assert.Equal(t, 1, e.creates(), "exactly one POST %s", pathProjects)
	assert.Len(t, e.sim.Projects(), 1)
	e.requireOwned("busy")
	e.checkInvariants()
}

// TestBindStormSharesProjectList: fresh namespaces bound at once share the
// Run:ai project list their binds need (the one that started first, and one
// more for all who asked while it ran) instead of each listing all projects;
// each still creates its own project, once.
func TestBindStormSharesProjectList(t *testing.T) {
	const n = 40
	var objs []client.Object
	for i := range n {
		objs = append(objs, managedNS(fmt.Sprintf("storm-%02d", i)))
	}
	e := newEnv(t, envOpts{objects: objs})
	e.sim.SetLatency(20 * time.Millisecond) // the benchmark's Run:ai round trip

	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = e.binder.Bind(ctxT(t), fmt.Sprintf("storm-%02d", i)) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "bind %d", i)
	}
	lists := 0
	for _, c := range e.sim.Calls() {
		if c.Method == http.MethodGet && c.Path == pathProjects {
			lists++
		}
	}
	t.Logf("%d concurrent binds: %d project list requests", n, lists)
	assert.LessOrEqual(t, lists, 3, "one shared list (or two) instead of %d", n)
	assert.Equal(t, n, e.creates(), "one POST %s per namespace", pathProjects)
	for i := range n {
		e.requireOwned(fmt.Sprintf("storm-%02d", i))
	}
	e.checkInvariants()
}

// TestTwoReplicasRaceOnOneNamespace: two replicas (separate Binders, each
// with its own Run:ai client and caches) bind one namespace at once.
//
// The interleaving is forced: replica B has read the namespace and looked
// the project up (none) when, just before B's create, replica A does its
// whole bind (create, then its one namespace patch). B's create then meets
// Run:ai's 409 and B's patch a namespace A has already recorded. B must
// settle on A's project: one project, both outcomes agree, and the two
// finalizer writes (strategic merge, no lock) leave ours once beside another
// controller's.
func TestTwoReplicasRaceOnOneNamespace(t *testing.T) {
	const other = "example.com/other-controller"
	ns := managedNS("contested")
	ns.Finalizers = []string{other}
	e := newEnv(t, envOpts{objects: []client.Object{ns}})
	replicaA := newBinder(t, e.sim, e.k8s, e.k8s) // same API server and Run:ai

	var (
		once sync.Once
		outA bind.Outcome
		errA error
	)
	e.binder.RunAI = hookedRunAI{API: e.binder.RunAI, beforeCreate: func(ctx context.Context) {
		once.Do(func() { outA, errA = replicaA.Bind(ctx, "contested") })
	}}

	outB, errB := e.binder.Bind(ctxT(t), "contested")
	require.NoError(t, errA, "replica A")
	require.NoError(t, errB, "replica B")

	assert.Equal(t, outA, outB, "both replicas report the same binding")
	assert.False(t, outB.Adopted, "the project is ours, whichever replica created it")
	p := e.requireOwned("contested")
	assert.Equal(t, p.ID, outB.ProjectID)
	assert.Len(t, e.sim.Projects(), 1)
	assert.ElementsMatch(t, []string{other, bind.Finalizer}, e.ns("contested").Finalizers, "ours once, the other controller's kept")

	var statuses []int
	for _, c := range e.sim.Calls() {
		if c.Method == http.MethodPost && c.Path == pathProjects {
			statuses = append(statuses, c.Status)
		}
	}
	assert.Equal(t, []int{http.StatusCreated, http.StatusConflict}, statuses, "B's create met the 409")
	e.checkInvariants()
}

// TestTwoReplicasRaceFreely: the same race with no forced order, over a few
// namespaces and several goroutines per replica: every bind succeeds and
// every namespace ends with one project.
func TestTwoReplicasRaceFreely(t *testing.T) {
	const namespaces, perReplica = 6, 3
	var objs []client.Object
	for i := range namespaces {
		objs = append(objs, managedNS(fmt.Sprintf("race-%d", i)))
	}
	e := newEnv(t, envOpts{objects: objs})
	replicas := []*bind.Binder{e.binder, newBinder(t, e.sim, e.k8s, e.k8s)}

	type result struct {
		out bind.Outcome
		err error
	}
	results := make(chan result, namespaces*perReplica*len(replicas))
	var wg sync.WaitGroup
	for i := range namespaces {
		for _, r := range replicas {
			for range perReplica {
				wg.Go(func() {
					out, err := r.Bind(ctxT(t), fmt.Sprintf("race-%d", i))
					results <- result{out, err}
				})
			}
		}
	}
	wg.Wait()
	close(results)
	ids := map[string]string{}
	for r := range results {
		require.NoError(t, r.err)
		if prev, ok := ids[r.out.Namespace]; ok {
			assert.Equal(t, prev, r.out.ProjectID, r.out.Namespace)
		}
		ids[r.out.Namespace] = r.out.ProjectID
		assert.False(t, r.out.Adopted, r.out.Namespace)
	}
	assert.Len(t, e.sim.Projects(), namespaces)
	for i := range namespaces {
		e.requireOwned(fmt.Sprintf("race-%d", i))
	}
	e.checkInvariants()
}

// TestBindWhileRunAIDown: an unbound namespace cannot be bound while Run:ai
// is down; the error says Run:ai is unavailable (admission turns that into
// "retry later") and the namespace stays as it was. A bound namespace needs
// no Run:ai call at all. Once Run:ai is back, the bind works.
func TestBindWhileRunAIDown(t *testing.T) {
	for _, warm := range []bool{false, true} {
		t.Run(fmt.Sprintf("warm caches=%v", warm), func(t *testing.T) {
			e := newEnv(t, envOpts{objects: []client.Object{managedNS("warmup"), managedNS("new-ns"), managedNS("bound-ns", queueKey, "bound-ns", idKey, "77")}})
			if warm { // cluster, node pool and department already cached
				_, err := e.binder.Bind(ctxT(t), "warmup")
				require.NoError(t, err)
			}
			require.NoError(t, e.sim.SetDown(true))

			_, err := e.binder.Bind(ctxT(t), "new-ns")
			require.Error(t, err)
			assert.True(t, runai.IsUnavailable(err), "want an Unavailable error, got %v", err)
			var refusal *bind.Refusal
			assert.False(t, errors.As(err, &refusal), "an outage is not a refusal: a retry will work")
			e.requireUnbound("new-ns")
			assert.False(t, hasFinalizer(e.ns("new-ns")))

			e.sim.ResetCalls()
			out, err := e.binder.Bind(ctxT(t), "bound-ns")
			require.NoError(t, err)
			assert.True(t, out.AlreadyBound)
			assert.Equal(t, "77", out.ProjectID)
			assert.Empty(t, e.sim.Calls(), "already bound: zero Run:ai calls")

			require.NoError(t, e.sim.SetDown(false))
			_, err = e.binder.Bind(ctxT(t), "new-ns")
			require.NoError(t, err)
			e.requireOwned("new-ns")
		})
	}
}

func ptr[T any](v T) *T { return &v }

// cachedNamespaces is an nsview.Getter serving fixed views, as the
// webhook's namespace cache would (possibly behind the API server).
type cachedNamespaces map[string]nsview.Namespace

func (c cachedNamespaces) Get(_ context.Context, name string) (nsview.Namespace, bool, error) {
	v, ok := c[name]
	return v, ok, nil
}

// A bind starts from the namespace cache when it shows an unbound, managed,
// live namespace (no live read behind a storm in the API server); anything
// else is read live.
func TestBindReadsNamespaceFromCacheWhenUnbound(t *testing.T) {
	unbound := nsview.Namespace{Name: "team-c", Labels: map[string]string{projectKey: "team-c"}}
	cases := []struct {
		name      string
		cached    cachedNamespaces
		liveReads int32
	}{
		{name: "unbound in the cache", cached: cachedNamespaces{"team-c": unbound}, liveReads: 0},
		{name: "not in the cache yet", cached: cachedNamespaces{}, liveReads: 1},
		{name: "bound in the cache", cached: cachedNamespaces{"team-c": {Name: "team-c", Labels: map[string]string{projectKey: "team-c", queueKey: "team-c"}}}, liveReads: 1},
		{name: "terminating in the cache", cached: cachedNamespaces{"team-c": {Name: "team-c", Labels: unbound.Labels, Terminating: true}}, liveReads: 1},
		{name: "unmanaged in the cache", cached: cachedNamespaces{"team-c": {Name: "team-c"}}, liveReads: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int32
			e := newEnv(t, envOpts{objects: []client.Object{managedNS("team-c")}})
			e.binder.Reader = interceptor.NewClient(e.k8s, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					reads.Add(1)
					return c.Get(ctx, key, obj, opts...)
				},
			})
			e.binder.Namespaces = tc.cached
			out, err := e.binder.Bind(ctxT(t), "team-c")
			require.NoError(t, err)
			assert.Equal(t, tc.liveReads, reads.Load(), "live reads of the namespace")
			assert.Equal(t, "team-c", e.ns("team-c").Labels[queueKey], "bound either way")
			assert.False(t, out.Adopted)
		})
	}
}

// A department label changed between the cached read and the binding patch
// is reported on the namespace: the project was made for the old one.
func TestBindReportsDepartmentChangedDuringBind(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("team-d", deptKey, "research")}})
	rec := record.NewFakeRecorder(10)
	e.binder.Events = rec
	e.binder.Namespaces = cachedNamespaces{"team-d": {Name: "team-d", Labels: map[string]string{projectKey: "team-d", deptKey: "vision"}}}
	_, err := e.binder.Bind(ctxT(t), "team-d")
	require.NoError(t, err)
	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	assert.Contains(t, strings.Join(events, "\n"), `DepartmentChangedDuringBind label hopsworks.ai/department changed from "vision" to "research"`)
}
