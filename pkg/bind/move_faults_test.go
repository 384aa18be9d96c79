package bind_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// Department moves when Run:ai's answers get lost or refused (found by the
// end-to-end fault matrix, e2e/faults_test.go).

func boundForMove(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, envOpts{
		seed:    runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}}},
		objects: []client.Object{managedNS("team-a")},
	})
	_, err := e.binder.Bind(ctxT(t), "team-a")
	require.NoError(t, err)
	e.requireOwned("team-a")
	return e
}

// The delete's answer is lost: the project is gone all the same, so the
// move goes on instead of claiming that nothing changed.
func TestMoveDeleteAnswerLost(t *testing.T) {
	e := boundForMove(t)
	before := e.project("team-a")
	e.sim.AddFault(runaitest.Fault{Method: "DELETE", PathPrefix: pathProjects, DropResponse: true})
	warnings, err := e.binder.Move(ctxT(t), "team-a", "", "research", false)
	require.NoError(t, err)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "moved Run:ai project team-a from department default to department research")
	after := e.project("team-a")
	assert.NotEqual(t, before.ID, after.ID)
	assert.Equal(t, e.dept("research").ID, after.ParentID)
	assert.Equal(t, after.ID, e.ns("team-a").Labels[idKey])
	e.checkInvariants()
}

// The create's answer is lost: the project exists in the new department,
// so the move is done (not "restored", which would fail on the name).
func TestMoveCreateAnswerLost(t *testing.T) {
	e := boundForMove(t)
	e.sim.AddFault(runaitest.Fault{Method: "POST", PathPrefix: pathProjects, DropResponse: true})
	warnings, err := e.binder.Move(ctxT(t), "team-a", "", "research", false)
	require.NoError(t, err)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "to department research")
	after := e.project("team-a")
	assert.Equal(t, e.dept("research").ID, after.ParentID)
	assert.Equal(t, after.ID, e.ns("team-a").Labels[idKey])
	assert.Len(t, e.boundTo("team-a"), 1)
	e.checkInvariants()
}

// The new department refuses the create: the project comes back in the old
// one with its quota, and the move is refused.
func TestMoveCreateRefusedRestores(t *testing.T) {
	e := boundForMove(t)
	before := e.project("team-a")
	e.sim.AddFault(runaitest.Fault{Method: "POST", PathPrefix: pathProjects, Status: 503, BodyContains: `"parentId":"` + e.dept("research").ID + `"`})
	_, err := e.binder.Move(ctxT(t), "team-a", "", "research", false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "created again in department default with its old quota")
	after := e.project("team-a")
	assert.Equal(t, before.ParentID, after.ParentID)
	assert.Equal(t, before.Resources[0].DeservedGPU(), after.Resources[0].DeservedGPU())
	assert.Equal(t, after.ID, e.ns("team-a").Labels[idKey])
	e.checkInvariants()
}

// The API server calls the webhook again after our own label write made its
// first attempt conflict: the finished move answers at once, with no Run:ai
// call (with Run:ai slow, a read there pushed the request past the webhook
// timeout, and a move that happened was refused).
func TestMoveRetriedAdmissionNeedsNoRunAICall(t *testing.T) {
	e := boundForMove(t)
	_, err := e.binder.Move(ctxT(t), "team-a", "", "research", false)
	require.NoError(t, err)
	e.sim.ResetCalls()
	warnings, err := e.binder.Move(ctxT(t), "team-a", "", "research", false)
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Empty(t, nonTokenCalls(e.sim), "the retried admission of a finished move reads nothing from Run:ai")
}

// A project of ours found by a later bind (the first bind was cut after the
// create) gets the namespace's finalizer, so deleting the namespace deletes
// it, as if that bind had created it.
func TestBindOfOurExistingProjectAddsFinalizer(t *testing.T) {
	e := newEnv(t, envOpts{objects: []client.Object{managedNS("team-a")}})
	cluster, err := e.binder.Cluster(ctxT(t))
	require.NoError(t, err)
	pool, err := e.binder.NodePool(ctxT(t), cluster.UUID)
	require.NoError(t, err)
	_, err = e.binder.RunAI.CreateProject(ctxT(t), bind.NewProjectRequest(cluster.UUID, e.dept("default").ID, "team-a", pool, 3))
	require.NoError(t, err)
	require.False(t, hasFinalizer(e.ns("team-a")))
	_, err = e.binder.Bind(ctxT(t), "team-a")
	require.NoError(t, err)
	e.requireOwned("team-a")
	assert.True(t, hasFinalizer(e.ns("team-a")), "an owned binding carries the finalizer")
}
