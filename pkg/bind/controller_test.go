package bind_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// TestReconcileBindsNewNamespace: the controller binds a new managed
// namespace right away; it leaves alone namespaces that are not Hopsworks
// projects, already bound, or seen while the integration is off. A refusal
// is not requeued (the pass retries), an outage is.
func TestReconcileBindsNewNamespace(t *testing.T) {
	plain := managedNS("plain")
	delete(plain.Labels, projectKey)
	e := newEnv(t, envOpts{seed: runaitest.Seed{Projects: []runaitest.ProjectSeed{{Name: "bound", Namespace: "bound"}}}, objects: []client.Object{
		managedNS("fresh"), plain, managedNS("bound", queueKey, "bound"),
		managedNS("bad-dept", deptKey, "Bad_Dept"), managedNS("later"),
	}})

	assert.Zero(t, e.reconcile("fresh"))
	e.requireOwned("fresh")

	e.sim.ResetCalls()
	assert.Zero(t, e.reconcile("plain"))
	assert.Zero(t, e.reconcile("bound"))
	assert.Zero(t, e.reconcile("gone-already"))
	assert.Empty(t, e.sim.Calls(), "nothing to do: no Run:ai call")

	assert.Zero(t, e.reconcile("bad-dept"), "a refusal is not requeued")
	e.requireUnbound("bad-dept")

	require.NoError(t, e.sim.SetDown(true))
	res := e.reconcile("later")
	assert.Positive(t, res.RequeueAfter, "an outage is retried")
	e.requireUnbound("later")
	require.NoError(t, e.sim.SetDown(false))

	e.binder.Enabled = false
	assert.Zero(t, e.reconcile("later"))
	e.requireUnbound("later")
	e.binder.Enabled = true
	assert.Zero(t, e.reconcile("later"))
	e.requireOwned("later")
	e.checkInvariants()
}

// TestDeleteOwnedProjectWithNamespace: deleting a namespace deletes the
// Run:ai project we created for it, waits until Run:ai has removed it
// (synchronously, or after a Deleting phase), then releases the namespace.
func TestDeleteOwnedProjectWithNamespace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"204 at once", 0}, {"202 then Deleting", 150 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{objects: []client.Object{managedNS("doomed"), managedNS("neighbour")}})
			for _, ns := range []string{"doomed", "neighbour"} {
				_, err := e.binder.Bind(ctxT(t), ns)
				require.NoError(t, err)
			}
			p := e.requireOwned("doomed")
			e.sim.SetDeleteDelay(tc.delay)

			e.delete("doomed")
			require.NotNil(t, e.ns("doomed"), "the finalizer holds the namespace")
			assert.NotNil(t, e.ns("doomed").DeletionTimestamp)

			assert.Zero(t, e.reconcile("doomed"))
			_, exists := e.sim.ProjectByName("doomed")
			assert.False(t, exists, "our project is deleted with its namespace")
			assert.Nil(t, e.ns("doomed"), "finalizer removed, namespace gone")
			assert.Equal(t, 1, e.sim.CountCalls(http.MethodDelete, pathProjects+"/"+p.ID))
			e.requireOwned("neighbour")
			e.checkInvariants()
		})
	}
}

// TestDeleteLeavesAdoptedProject: an adopted project is never deleted, even
// when the namespace carries our finalizer (left from a failed create) or
// the project has the namespace's name.
func TestDeleteLeavesAdoptedProject(t *testing.T) {
	cases := []struct {
		name, project, namespace string
		finalizer                bool
	}{
		{name: "no finalizer", project: "legacy", namespace: "team-x"},
		{name: "leftover finalizer", project: "legacy", namespace: "team-x", finalizer: true},
		{name: "same name, leftover finalizer", project: "team-y", namespace: "team-y", finalizer: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{
				seed:    runaitest.Seed{Projects: []runaitest.ProjectSeed{{Name: tc.project, Namespace: tc.namespace}}},
				objects: []client.Object{managedNS(tc.namespace)},
			})
			_, err := e.binder.Bind(ctxT(t), tc.namespace)
			require.NoError(t, err)
			e.requireAdopted(tc.namespace, tc.project)
			if tc.finalizer {
				ns := e.ns(tc.namespace)
				ns.Finalizers = append(ns.Finalizers, bind.Finalizer)
				require.NoError(t, e.k8s.Update(ctxT(t), ns))
			}

			e.delete(tc.namespace)
			assert.Zero(t, e.reconcile(tc.namespace))
			assert.Nil(t, e.ns(tc.namespace), "the namespace is released")
			assert.Equal(t, tc.namespace, e.project(tc.project).BoundNamespace(), "the adopted project stays")
			assert.Zero(t, e.sim.CountCalls(http.MethodDelete, ""))
		})
	}
}

// TestDeleteWhileRunAIDown: with Run:ai down the finalizer stays and the
// delete is requeued; once Run:ai is back, the project is deleted and the
// namespace released. Nothing leaks.
func TestDeleteWhileRunAIDown(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("stuck")}})
	_, err := e.binder.Bind(ctxT(t), "stuck")
	require.NoError(t, err)
	e.requireOwned("stuck")

	require.NoError(t, e.sim.SetDown(true))
	e.delete("stuck")
	for range 2 {
		res := e.reconcile("stuck")
		assert.Positive(t, res.RequeueAfter, "requeued while Run:ai is down")
		ns := e.ns("stuck")
		require.NotNil(t, ns, "the finalizer holds the namespace")
		assert.True(t, hasFinalizer(ns))
	}

	require.NoError(t, e.sim.SetDown(false))
	e.project("stuck") // still there: nothing was deleted while down
	assert.Zero(t, e.reconcile("stuck"))
	_, exists := e.sim.ProjectByName("stuck")
	assert.False(t, exists, "deleted once Run:ai is back")
	assert.Nil(t, e.ns("stuck"))
	assert.Empty(t, e.sim.Projects(), "nothing leaked")
}

// TestDeleteWhenIntegrationOff: with run_ai_enable=false the namespace is
// released and the Run:ai project left in place (nothing calls Run:ai).
func TestDeleteWhenIntegrationOff(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("left")}})
	_, err := e.binder.Bind(ctxT(t), "left")
	require.NoError(t, err)
	e.binder.Enabled = false
	e.sim.ResetCalls()
	e.delete("left")
	assert.Zero(t, e.reconcile("left"))
	assert.Nil(t, e.ns("left"))
	e.project("left")
	assert.Empty(t, e.sim.Calls())
}
