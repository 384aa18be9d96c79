package bind_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// TestCrashCutPoints cuts a bind at each point of its order of writes
// (create, then one patch with the labels and, for ours, the finalizer) and
// checks that the next pass (or bind, or delete) repairs it: one Run:ai
// project per namespace, ownership recorded exactly for the projects we
// created, labels that tell the truth, nothing leaked.
func TestCrashCutPoints(t *testing.T) {
	t.Run("a: created, label patch failed", func(t *testing.T) {
		funcs, failed := failPatchOnce(`"` + queueKey + `":"`)
		e := newEnv(t, envOpts{objects: []client.Object{managedNS("cut-a")}, funcs: funcs})

		_, err := e.binder.Bind(ctxT(t), "cut-a")
		require.Error(t, err)
		require.EqualValues(t, 1, failed.Load(), "the label patch was the one that failed")
		e.requireUnbound("cut-a")
		require.Len(t, e.boundTo("cut-a"), 1, "the project was created")
		assert.False(t, hasFinalizer(e.ns("cut-a")), "the finalizer travels with the labels: neither was written")

		res := e.pass()
		assert.Equal(t, 1, res.Bound)
		p := e.requireOwned("cut-a") // labels and finalizer
		assert.Equal(t, bind.OwnerMarker("cut-a"), p.Description, "recognised as ours by the marker")
		assert.Equal(t, 1, e.creates(), "no second project")
		assert.Equal(t, bind.StatusOK, e.ns("cut-a").Annotations[bind.StatusAnnotation])
		e.checkInvariants()
	})

	for _, via := range []string{"pass", "bind"} {
		t.Run("b: create response lost, next "+via, func(t *testing.T) {
			e := newEnv(t, envOpts{objects: []client.Object{managedNS("cut-b")}})
			e.sim.AddFault(runaitest.Fault{Method: http.MethodPost, PathPrefix: pathProjects, DropResponse: true, Times: 1})

			_, err := e.binder.Bind(ctxT(t), "cut-b")
			require.Error(t, err)
			assert.True(t, runai.IsUnavailable(err), "a cut connection is an outage: %v", err)
			e.requireUnbound("cut-b")
			require.Len(t, e.boundTo("cut-b"), 1, "Run:ai created the project before the answer was lost")

			if via == "pass" {
				res := e.pass()
				assert.Equal(t, 1, res.Bound)
			} else {
				out, err := e.binder.Bind(ctxT(t), "cut-b")
				require.NoError(t, err)
				assert.False(t, out.Adopted, "found by name and marker: ours")
			}
			e.requireOwned("cut-b")
			assert.Equal(t, 1, e.creates(), "found, not created again")
			assert.Len(t, e.sim.Projects(), 1)
			e.checkInvariants()
		})
	}

	t.Run("c: owned project deleted by an admin after labelling", func(t *testing.T) {
		e := newEnv(t, envOpts{objects: []client.Object{managedNS("cut-c")}})
		_, err := e.binder.Bind(ctxT(t), "cut-c")
		require.NoError(t, err)
		old := e.requireOwned("cut-c")
		require.True(t, e.sim.DeleteProjectNow("cut-c"))

		res := e.pass()
		assert.Equal(t, 1, res.Rebound, "stale labels cleared")
		assert.Equal(t, 1, res.Bound, "bound again")
		p := e.requireOwned("cut-c")
		assert.NotEqual(t, old.ID, p.ID, "labels point to the new project")
		e.checkInvariants()
	})

	t.Run("d: adopted project deleted by an admin", func(t *testing.T) {
		e := newEnv(t, envOpts{
			seed:    runaitest.Seed{Projects: []runaitest.ProjectSeed{{Name: "legacy", Namespace: "team-x"}}},
			objects: []client.Object{managedNS("team-x")},
		})
		_, err := e.binder.Bind(ctxT(t), "team-x")
		require.NoError(t, err)
		e.requireAdopted("team-x", "legacy")
		require.True(t, e.sim.DeleteProjectNow("legacy"))

		res := e.pass()
		assert.Equal(t, 1, res.Rebound)
		p := e.requireOwned("team-x")
		assert.Equal(t, "team-x", p.Name, "our project is named after the namespace")
		e.checkInvariants()
	})

	t.Run("e: create failed, namespace deleted", func(t *testing.T) {
		e := newEnv(t, envOpts{objects: []client.Object{managedNS("cut-e")}})
		e.sim.AddFault(runaitest.Fault{Method: http.MethodPost, PathPrefix: pathProjects, Status: http.StatusInternalServerError, Times: 1})

		_, err := e.binder.Bind(ctxT(t), "cut-e")
		require.Error(t, err)
		assert.True(t, runai.IsUnavailable(err))
		assert.False(t, hasFinalizer(e.ns("cut-e")), "nothing is written to the namespace before the create")
		e.requireUnbound("cut-e")
		assert.Empty(t, e.sim.Projects())

		e.delete("cut-e")
		assert.Nil(t, e.ns("cut-e"), "no finalizer of ours holds it")
		assert.Zero(t, e.reconcile("cut-e"))
		assert.Zero(t, e.sim.CountCalls(http.MethodDelete, ""))
		e.pass()
		assert.Empty(t, e.sim.Projects(), "the pass does not bind a deleted namespace")
		e.checkInvariants()
	})

	t.Run("e': created, label failed, namespace deleted before any pass", func(t *testing.T) {
		funcs, _ := failPatchOnce(`"` + queueKey + `":"`)
		e := newEnv(t, envOpts{objects: []client.Object{managedNS("cut-e2")}, funcs: funcs})
		_, err := e.binder.Bind(ctxT(t), "cut-e2")
		require.Error(t, err)
		require.Len(t, e.boundTo("cut-e2"), 1)
		assert.False(t, hasFinalizer(e.ns("cut-e2")))

		e.delete("cut-e2")
		assert.Nil(t, e.ns("cut-e2"), "no finalizer of ours holds it")
		assert.Zero(t, e.reconcile("cut-e2"))
		require.Len(t, e.boundTo("cut-e2"), 1, "the namespace went without its project")

		res := e.pass()
		assert.Equal(t, 1, res.OrphansDeleted, "found by its marker, its namespace gone: deleted")
		assert.Empty(t, e.boundTo("cut-e2"), "nothing leaked")
		e.checkInvariants()
	})
}

// TestNamespaceDeletedDuringBind: the namespace is deleted after the bind's
// create and before its patch, so no finalizer of ours holds it. The bind
// says so in its error and deletes the project it created (best effort);
// when Run:ai refuses that delete, the next pass deletes the project once the
// namespace is gone. Either way nothing leaks. "terminating" is a namespace
// another finalizer still holds: the API server refuses to add ours.
func TestNamespaceDeletedDuringBind(t *testing.T) {
	const hold = "example.com/hold"
	cases := []struct {
		name        string
		terminating bool
		deleteFails bool
	}{
		{name: "gone, the bind deletes its project"},
		{name: "gone, the bind's delete fails, the pass deletes it", deleteFails: true},
		{name: "terminating, the bind deletes its project", terminating: true},
		{name: "terminating, the bind's delete fails, the pass deletes it once gone", terminating: true, deleteFails: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := managedNS("doomed")
			if tc.terminating {
				ns.Finalizers = []string{hold}
			}
			e := newEnv(t, envOpts{objects: []client.Object{ns}, funcs: noNewFinalizersWhileDeleting()})
			e.binder.RunAI = hookedRunAI{API: e.binder.RunAI, afterCreate: func(context.Context, runai.Project) {
				e.delete("doomed")
				if tc.deleteFails {
					e.sim.AddFault(runaitest.Fault{Method: http.MethodDelete, PathPrefix: pathProjects, Status: http.StatusInternalServerError})
				}
			}}

			_, err := e.binder.Bind(ctxT(t), "doomed")
			t.Logf("bind: %v", err)
			var refusal *bind.Refusal
			require.ErrorAs(t, err, &refusal, "a deleted namespace cannot be bound by retrying")
			assert.Contains(t, err.Error(), "namespace doomed was deleted while it was being bound")
			assert.Equal(t, 1, e.creates())
			if tc.terminating {
				require.NotNil(t, e.ns("doomed"))
				assert.Equal(t, []string{hold}, e.ns("doomed").Finalizers, "ours was refused")
			} else {
				assert.Nil(t, e.ns("doomed"))
			}

			if !tc.deleteFails {
				assert.Contains(t, err.Error(), "deleted Run:ai project doomed")
				assert.Empty(t, e.boundTo("doomed"), "the bind deleted its project")
				assert.Zero(t, e.pass().OrphansDeleted, "nothing left for the pass")
				e.checkInvariants()
				return
			}
			assert.Contains(t, err.Error(), "the background pass deletes it")
			require.Len(t, e.boundTo("doomed"), 1, "Run:ai refused the delete")
			e.sim.ClearFaults()
			if tc.terminating {
				assert.Zero(t, e.pass().OrphansDeleted, "not while the namespace still exists")
				require.Len(t, e.boundTo("doomed"), 1)
				release := e.ns("doomed")
				release.Finalizers = nil
				require.NoError(t, e.k8s.Update(ctxT(t), release)) // the other controller lets go
				require.Nil(t, e.ns("doomed"))
			}
			assert.Equal(t, 1, e.pass().OrphansDeleted)
			assert.Empty(t, e.boundTo("doomed"), "nothing leaked")
			e.checkInvariants()
		})
	}
}

// TestPassReadBudget: a pass over 2,000 bound namespaces reads Run:ai's
// project and department lists once (all pages) and writes nothing, in
// Run:ai or in Kubernetes.
func TestPassReadBudget(t *testing.T) {
	const total = 2000
	sim := runaitest.Run(t, runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}}})
	seeder := newRunAI(t, sim)
	ctx := ctxT(t)
	cluster, err := seeder.Cluster(ctx)
	require.NoError(t, err)
	pool, err := seeder.DefaultNodePool(ctx, cluster.UUID)
	require.NoError(t, err)
	research := sim.AddDepartment("research")
	def := sim.AddDepartment("default")

	// Half the projects are ours (created through the API with our marker,
	// first, while the list is short), half adopted (made by an admin).
	objs := make([]client.Object, total)
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("ns-%04d", i)
				dept := def
				ns := managedNS(name)
				if i%4 == 0 {
					dept = research
					ns.Labels[deptKey] = "research"
				}
				p, err := seeder.CreateProject(ctx, bind.NewProjectRequest(cluster.UUID, dept.ID, name, pool, 0))
				if !assert.NoError(t, err) {
					continue
				}
				ns.Labels[queueKey], ns.Labels[idKey] = name, p.ID
				ns.Finalizers = []string{bind.Finalizer}
				ns.Annotations = map[string]string{bind.StatusAnnotation: bind.StatusOK}
				mu.Lock()
				objs[i] = ns
				mu.Unlock()
			}
		})
	}
	for i := 0; i < total; i += 2 {
		work <- i
	}
	close(work)
	wg.Wait()
	require.False(t, t.Failed())
	for i := 1; i < total; i += 2 {
		name := fmt.Sprintf("ns-%04d", i)
		ns := managedNS(name, queueKey, "adopted-"+name)
		dept := "default"
		if i%4 == 1 {
			dept = "research"
			ns.Labels[deptKey] = "research"
		}
		sim.AddProject(runaitest.ProjectSeed{Name: "adopted-" + name, Namespace: name, Department: dept})
		ns.Annotations = map[string]string{bind.StatusAnnotation: bind.StatusOK}
		objs[i] = ns
	}
	require.Len(t, sim.Projects(), total)

	var k8sWrites atomic.Int32
	e := newEnv(t, envOpts{objects: objs, funcs: &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			k8sWrites.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
	}})
	// The pass runs against the simulator seeded above, with a fresh client
	// (nothing cached: the cluster lookup is counted too).
	e.sim = sim
	e.binder.RunAI = newRunAI(t, sim)
	sim.ResetCalls()

	res := e.pass()
	assert.Equal(t, bind.PassResult{Namespaces: total}, res)
	assert.Zero(t, sim.CountWrites(), "a pass over bound namespaces writes nothing to Run:ai")
	assert.Zero(t, k8sWrites.Load(), "nor to Kubernetes")

	calls := nonTokenCalls(sim)
	depts := len(sim.Departments())
	budget := ceilDiv(total, runaitest.MaxPageSize) + ceilDiv(depts, runaitest.MaxPageSize) + 2
	t.Logf("pass over %d namespaces, %d projects, %d departments: %d Run:ai calls (budget %d), %d token calls:%s",
		total, total, depts, len(calls), budget, len(sim.Calls())-len(calls), describeCalls(calls))
	assert.LessOrEqual(t, len(calls), budget)
	assert.Equal(t, ceilDiv(total, runaitest.MaxPageSize), sim.CountCalls(http.MethodGet, pathProjects), "one request per page of projects")
	e.checkInvariants()
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// TestPassDeletesOrphansOnly: the pass deletes a project carrying our marker
// for a namespace that no longer exists, and leaves alone projects without
// the marker, with the marker of another namespace, or whose namespace
// exists (managed or not).
func TestPassDeletesOrphansOnly(t *testing.T) {
	plain := managedNS("plain")
	delete(plain.Labels, projectKey)
	e := newEnv(t, envOpts{
		seed:    runaitest.Seed{Projects: []runaitest.ProjectSeed{{Name: "foreign", Namespace: "gone-too"}}},
		objects: []client.Object{managedNS("alive"), plain},
	})
	_, err := e.binder.Bind(ctxT(t), "alive")
	require.NoError(t, err)

	ctx := ctxT(t)
	cluster, err := e.binder.Cluster(ctx)
	require.NoError(t, err)
	pool, err := e.binder.NodePool(ctx, cluster.UUID)
	require.NoError(t, err)
	def := e.dept("default")
	mk := func(req runai.ProjectCreationRequest) {
		_, err := e.binder.RunAI.CreateProject(ctx, req)
		require.NoError(t, err)
	}
	mk(bind.NewProjectRequest(cluster.UUID, def.ID, "gone-ns", pool, 1)) // ours, namespace gone: orphan
	mk(bind.NewProjectRequest(cluster.UUID, def.ID, "plain", pool, 1))   // ours, namespace exists
	mismatch := bind.NewProjectRequest(cluster.UUID, def.ID, "gone-3", pool, 1)
	mismatch.Description = bind.OwnerMarker("other") // marker of another namespace: not ours to judge
	mk(mismatch)

	e.sim.ResetCalls()
	res := e.pass()
	assert.Equal(t, 1, res.OrphansDeleted)
	_, exists := e.sim.ProjectByName("gone-ns")
	assert.False(t, exists, "orphan deleted")
	for _, name := range []string{"foreign", "gone-3", "plain", "alive"} {
		e.project(name)
	}
	assert.Equal(t, 1, e.sim.CountWrites(), "one delete, nothing else")
	e.requireOwned("alive")
	e.checkInvariants()
}

// TestPassReportsDrift: a bound project in another department than its
// namespace's department maps to is reported (count, status annotation),
// never moved; once it is back, the status is OK again.
func TestPassReportsDrift(t *testing.T) {
	cases := []struct {
		name    string
		seed    []runaitest.ProjectSeed
		ns      string
		project string
		drift   func(*env) // makes the drift behind our back
		undo    func(*env)
	}{
		{
			name: "owned project moved by an admin", ns: "team-d", project: "team-d",
			drift: func(e *env) { require.NoError(e.t, e.sim.MoveProject("team-d", "other")) },
			undo:  func(e *env) { require.NoError(e.t, e.sim.MoveProject("team-d", "research")) },
		},
		{
			name: "adopted project in another department", ns: "team-x", project: "legacy",
			seed:  []runaitest.ProjectSeed{{Name: "legacy", Namespace: "team-x", Department: "other"}},
			drift: func(*env) {},
			undo:  func(e *env) { require.NoError(e.t, e.sim.MoveProject("legacy", "research")) },
		},
		{
			name: "department renamed", ns: "team-r", project: "team-r",
			drift: func(e *env) { require.NoError(e.t, e.sim.RenameDepartment("research", "research-old")) },
			undo:  func(e *env) { require.NoError(e.t, e.sim.RenameDepartment("research-old", "research")) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{
				seed: runaitest.Seed{
					Departments: []runaitest.DepartmentSeed{{Name: "research"}, {Name: "other"}},
					Projects:    tc.seed,
				},
				objects: []client.Object{managedNS(tc.ns, deptKey, "research"), managedNS("steady", deptKey, "other")},
			})
			for _, ns := range []string{tc.ns, "steady"} {
				_, err := e.binder.Bind(ctxT(t), ns)
				require.NoError(t, err)
			}
			labels := e.ns(tc.ns).Labels
			tc.drift(e)

			e.sim.ResetCalls()
			res := e.pass()
			assert.Equal(t, 1, res.Drift)
			status := e.ns(tc.ns).Annotations[bind.StatusAnnotation]
			assert.True(t, strings.HasPrefix(status, bind.StatusDrift), "status annotation %q", status)
			assert.Contains(t, status, tc.project)
			assert.Equal(t, bind.StatusOK, e.ns("steady").Annotations[bind.StatusAnnotation])
			assert.Equal(t, labels, e.ns(tc.ns).Labels, "the binding is kept")
			assert.Zero(t, e.sim.CountWrites(), "drift is reported, not repaired")

			tc.undo(e)
			res = e.pass()
			assert.Zero(t, res.Drift)
			assert.Equal(t, bind.StatusOK, e.ns(tc.ns).Annotations[bind.StatusAnnotation])
			e.checkInvariants()
		})
	}
}

// TestPassBindsUnbound: the pass binds namespaces that are not bound yet
// (created or adopted), reports the ones it cannot bind in the status
// annotation, and skips namespaces being deleted and unmanaged ones.
func TestPassBindsUnbound(t *testing.T) {
	plain := managedNS("plain")
	delete(plain.Labels, projectKey)
	e := newEnv(t, envOpts{
		seed: runaitest.Seed{Projects: []runaitest.ProjectSeed{
			{Name: "legacy", Namespace: "team-x"},
			{Name: "taken", Namespace: "elsewhere"},
		}},
		objects: []client.Object{managedNS("new-a"), managedNS("team-x"), managedNS("taken"), managedNS("bad", deptKey, "BAD"), plain},
	})
	res := e.pass()
	assert.Equal(t, 4, res.Namespaces)
	assert.Equal(t, 2, res.Bound)
	assert.Equal(t, 2, res.Unbound)
	e.requireOwned("new-a")
	e.requireAdopted("team-x", "legacy")
	for _, ns := range []string{"taken", "bad"} {
		e.requireUnbound(ns)
		assert.True(t, strings.HasPrefix(e.ns(ns).Annotations[bind.StatusAnnotation], bind.StatusNotBound), ns)
	}
	assert.Empty(t, e.ns("plain").Labels[queueKey])
	assert.Equal(t, 1, e.creates())

	e.sim.ResetCalls()
	res = e.pass()
	assert.Equal(t, 0, res.Bound, "second pass: nothing new")
	assert.Zero(t, e.sim.CountWrites())
	e.checkInvariants()
}

// TestPassWhileRunAIDown: a pass that cannot read Run:ai fails as a whole
// and touches no namespace.
func TestPassWhileRunAIDown(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("bound"), managedNS("unbound")}})
	_, err := e.binder.Bind(ctxT(t), "bound")
	require.NoError(t, err)
	before := e.ns("bound")
	require.NoError(t, e.sim.SetDown(true))

	_, err = e.ctrl.Pass(ctxT(t))
	require.Error(t, err)
	assert.True(t, runai.IsUnavailable(err), "%v", err)
	assert.Equal(t, before.Labels, e.ns("bound").Labels)
	assert.Equal(t, before.ResourceVersion, e.ns("bound").ResourceVersion)
	e.requireUnbound("unbound")
}

// TestPassWhenIntegrationOff: with run_ai_enable=false the pass calls
// nothing and marks namespaces that still carry binding labels with
// RUN_AI_BINDING_LEFT.
func TestPassWhenIntegrationOff(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{
		managedNS("left", queueKey, "left", idKey, "5"), managedNS("adopted-left", queueKey, "legacy"), managedNS("never"),
	}})
	e.binder.Enabled = false
	res := e.pass()
	assert.Equal(t, bind.PassResult{}, res)
	assert.Empty(t, e.sim.Calls())
	for _, ns := range []string{"left", "adopted-left"} {
		assert.True(t, strings.HasPrefix(e.ns(ns).Annotations[bind.StatusAnnotation], bind.StatusBindingLeft), ns)
	}
	assert.Empty(t, e.ns("never").Annotations[bind.StatusAnnotation])
	var list corev1.NamespaceList
	require.NoError(t, e.k8s.List(ctxT(t), &list))
	assert.Len(t, list.Items, 3)
}
