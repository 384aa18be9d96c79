package runaitest_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

func TestAdminEndpoints(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{Projects: []runaitest.ProjectSeed{{Name: "p", DeservedGPUs: 2}}})
	a := newAPI(t, s)
	admin := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		status, b := a.do(method, path, body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return status, m
	}

	status, _ := admin(http.MethodPost, "/_sim/faults", map[string]any{"method": "GET", "pathPrefix": "/api/v1/clusters", "status": 503, "times": 1, "retryAfter": "3s"})
	require.Equal(t, http.StatusCreated, status)
	faults := s.Faults()
	require.Len(t, faults, 1)
	assert.Equal(t, 3*time.Second, faults[0].RetryAfter)
	st, _ := a.do(http.MethodGet, "/api/v1/clusters", nil)
	assert.Equal(t, http.StatusServiceUnavailable, st)

	status, _ = admin(http.MethodPost, "/_sim/faults", map[string]any{"status": 200})
	assert.Equal(t, http.StatusBadRequest, status, "a fault must fail")
	status, _ = admin(http.MethodPost, "/_sim/faults", map[string]any{"statuz": 500})
	assert.Equal(t, http.StatusBadRequest, status, "unknown fields are refused")
	s.AddFault(runaitest.Fault{Status: 500})
	status, _ = admin(http.MethodDelete, "/_sim/faults", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, s.Faults())

	status, _ = admin(http.MethodPost, "/_sim/allocation", map[string]any{"project": "p", "allocated": 2, "allocatedNonPreemptible": 1})
	require.Equal(t, http.StatusOK, status)
	p, _ := s.ProjectByName("p")
	assert.Equal(t, 2.0, p.Status.QuotaStatus.Allocated.GPU)
	status, _ = admin(http.MethodPost, "/_sim/allocation", map[string]any{"project": "nope", "allocated": 1})
	assert.Equal(t, http.StatusBadRequest, status)

	status, _ = admin(http.MethodPost, "/_sim/free-gpus", map[string]any{"nodePool": "default", "free": 0})
	require.Equal(t, http.StatusOK, status)

	status, _ = admin(http.MethodPost, "/_sim/departments", map[string]any{"name": "research"})
	require.Equal(t, http.StatusCreated, status)
	status, _ = admin(http.MethodPost, "/_sim/projects", map[string]any{"name": "adopted", "department": "research", "namespace": "hops-adopted"})
	require.Equal(t, http.StatusCreated, status)
	status, _ = admin(http.MethodPost, "/_sim/projects", map[string]any{"name": "other", "namespace": "hops-adopted"})
	assert.Equal(t, http.StatusConflict, status, "one project per namespace")
	status, _ = admin(http.MethodPost, "/_sim/projects/adopted/move", map[string]any{"department": "default"})
	require.Equal(t, http.StatusOK, status)
	status, _ = admin(http.MethodPost, "/_sim/departments/research/rename", map[string]any{"name": "science"})
	require.Equal(t, http.StatusOK, status)
	_, ok := s.DepartmentByName("science")
	assert.True(t, ok)
	status, _ = admin(http.MethodPost, "/_sim/projects/adopted/phase", map[string]any{"phase": "NotReady"})
	require.Equal(t, http.StatusOK, status)
	status, _ = admin(http.MethodDelete, "/_sim/projects/adopted", nil)
	require.Equal(t, http.StatusOK, status)
	_, ok = s.ProjectByName("adopted")
	assert.False(t, ok)

	status, m := admin(http.MethodGet, "/_sim/state", nil)
	require.Equal(t, http.StatusOK, status)
	for _, k := range []string{"cluster", "nodePools", "departments", "projects", "down", "now"} {
		assert.Contains(t, m, k)
	}

	status, _ = admin(http.MethodPost, "/_sim/delays", map[string]any{"createDelay": "1m", "deleteDelay": "2m"})
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, time.Minute, s.Seed().CreateDelay)
	before := s.Now()
	status, _ = admin(http.MethodPost, "/_sim/advance?by=1h", nil)
	require.Equal(t, http.StatusOK, status)
	assert.WithinDuration(t, before.Add(time.Hour), s.Now(), 5*time.Second)

	status, m = admin(http.MethodGet, "/_sim/calls", nil)
	require.Equal(t, http.StatusOK, status)
	assert.NotEmpty(t, m["calls"])
	status, _ = admin(http.MethodDelete, "/_sim/calls", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, s.Calls(), "admin calls themselves are not recorded")

	status, _ = admin(http.MethodPost, "/_sim/revoke-tokens", nil)
	require.Equal(t, http.StatusOK, status)
	st, _ = a.do(http.MethodGet, "/api/v1/clusters", nil)
	assert.Equal(t, http.StatusUnauthorized, st)

	status, _ = admin(http.MethodPost, "/_sim/latency?d=10ms", nil)
	require.Equal(t, http.StatusOK, status)

	status, _ = admin(http.MethodPost, "/_sim/down", nil)
	assert.Equal(t, http.StatusBadRequest, status, "down needs ?for")
	status, _ = admin(http.MethodPost, "/_sim/down?for=300ms", nil)
	require.Equal(t, http.StatusOK, status)
	require.Eventually(t, s.IsDown, 2*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return !s.IsDown() }, 5*time.Second, 20*time.Millisecond)
	status, _ = admin(http.MethodGet, "/_sim/state", nil)
	assert.Equal(t, http.StatusOK, status, "back on the same port")

	status, _ = admin(http.MethodGet, "/_sim/nope", nil)
	assert.Equal(t, http.StatusNotFound, status)
}
