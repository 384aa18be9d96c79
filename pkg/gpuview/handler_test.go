package gpuview_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/gpuview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// fakeAuth accepts the tokens it knows and allows "user/namespace/resource".
type fakeAuth struct {
	users map[string]string
	allow map[string]bool
	down  atomic.Bool
}

func (a *fakeAuth) Authenticate(_ context.Context, token string) (gpuview.User, bool, error) {
	if a.down.Load() {
		return gpuview.User{}, false, errors.New("TokenReview: connection refused")
	}
	name, ok := a.users[token]
	return gpuview.User{Name: name}, ok, nil
}

func (a *fakeAuth) Authorize(_ context.Context, u gpuview.User, acc gpuview.Access) (bool, string, error) {
	if acc.Verb != "get" {
		return false, "only get", nil
	}
	return a.allow[u.Name+"/"+acc.Namespace+"/"+acc.Resource], "", nil
}

type testbed struct {
	sim    *runaitest.Server
	srv    *httptest.Server
	k8s    client.Client
	writes *atomic.Int32 // Kubernetes writes by the views (must stay 0)
	svc    *gpuview.Service
	auth   *fakeAuth
}

// newTestbed: the simulator with departments research and vision; namespace
// team (research) bound to a project with 2 deserved GPUs, mkt (marketing,
// no Run:ai twin) bound to a project in the default department, fresh
// (managed, unbound), plain (not managed). alice may view team; root may
// view everything.
func newTestbed(t *testing.T, enabled bool) *testbed {
	t.Helper()
	sim := runaitest.Run(t, runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research", DeservedGPUs: 8}, {Name: "vision"}}})
	team := sim.AddProject(runaitest.ProjectSeed{Name: "team", Department: "research", Namespace: "team", DeservedGPUs: 2})
	sim.AddProject(runaitest.ProjectSeed{Name: "mkt", Department: "default", Namespace: "mkt", DeservedGPUs: 1})
	require.NoError(t, sim.SetAllocation("team", 1.5, 1))
	require.NoError(t, sim.SetFreeGPUs("default", 3))
	rc, err := runai.NewClient(runai.ClientConfig{
		BaseURL: sim.URL(), ClientID: runaitest.DefaultClientID, ClientSecret: runaitest.DefaultClientSecret, Logger: logr.Discard(),
		Retry: runai.RetryPolicy{MaxAttempts: 2, BaseDelay: 5 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
	})
	require.NoError(t, err)
	namespace := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		namespace("team", map[string]string{projectKey: "team", deptKey: "research", queueKey: "team", idKey: team.ID}),
		namespace("mkt", map[string]string{projectKey: "mkt", deptKey: "marketing", queueKey: "mkt"}),
		namespace("fresh", map[string]string{projectKey: "fresh", deptKey: "research"}),
		namespace("plain", nil),
	).Build()
	writes := &atomic.Int32{}
	count := func() { writes.Add(1) }
	k8s := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, o, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, o, opts...)
		},
	})
	binder := &bind.Binder{RunAI: rc, Client: k8s, Reader: k8s, Keys: keys, DefaultDepartment: "default", GPUQuota: 2, Log: logr.Discard(), Enabled: enabled}
	svc := &gpuview.Service{Keys: keys, Enabled: enabled, DefaultDepartment: "default", Namespaces: k8s, RunAI: rc, Lookups: binder}
	auth := &fakeAuth{
		users: map[string]string{"tok-alice": "alice", "tok-root": "root"},
		allow: map[string]bool{"alice/team/" + gpuview.ResourceGPUAvailability: true, "root//" + gpuview.ResourceRunAIAdmin: true},
	}
	for _, ns := range []string{"team", "mkt", "fresh", "plain", "nowhere"} {
		auth.allow["root/"+ns+"/"+gpuview.ResourceGPUAvailability] = true
	}
	srv := httptest.NewServer(gpuview.NewHandler(gpuview.Deps{Service: svc, Authenticator: auth, Authorizer: auth, Log: logr.Discard()}))
	t.Cleanup(srv.Close)
	return &testbed{sim: sim, srv: srv, k8s: k8s, writes: writes, svc: svc, auth: auth}
}

// do sends method to path with token in header ("" = none) and returns the status and body.
func (tb *testbed) do(t *testing.T, method, path, header, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, tb.srv.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set(header, "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	return resp.StatusCode, resp.Header, body
}

func (tb *testbed) get(t *testing.T, path, token string) (int, []byte) {
	code, _, body := tb.do(t, http.MethodGet, path, "Authorization", token)
	return code, body
}

func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

var namespaceViewKeys = []string{
	"namespace", "hopsworks_department", "project", "department", "status", "message", "deserved", "allocated",
	"allocated_non_preemptible", "available_non_preemptible", "available_preemptible", "terminal_gpus_allowed", "node_pool", "read_at",
}

func TestHandlerNamespaceViewMatchesRunAI(t *testing.T) {
	tb := newTestbed(t, true)
	code, body := tb.get(t, gpuview.NamespacePath("team"), "tok-alice")
	require.Equal(t, http.StatusOK, code, string(body))

	raw := decode[map[string]any](t, body)
	have := make([]string, 0, len(raw))
	for k := range raw {
		have = append(have, k)
	}
	assert.ElementsMatch(t, namespaceViewKeys, have, "the JSON contract")
	at, err := time.Parse(time.RFC3339, raw["read_at"].(string))
	require.NoError(t, err, "read_at is RFC3339")
	assert.WithinDuration(t, time.Now(), at, time.Minute)

	v := decode[gpuview.NamespaceView](t, body)
	assert.Equal(t, gpuview.StatusOK, v.Status, v.Message)
	assert.Equal(t, "team", v.Project)
	assert.Equal(t, "research", v.Department)
	assert.Equal(t, "research", v.HopsworksDepartment)
	assert.Equal(t, "default", v.NodePool)
	assert.Equal(t, f(2), v.Deserved)
	assert.Equal(t, f(1.5), v.Allocated)
	assert.Equal(t, f(1), v.AllocatedNonPreemptible)
	assert.Equal(t, f(1), v.AvailableNonPreemptible)
	assert.Equal(t, f(3), v.AvailablePreemptible)
	assert.True(t, v.TerminalGPUsAllowed)
	assert.Zero(t, tb.sim.CountWrites(), "reading writes nothing to Run:ai")
	assert.Zero(t, tb.writes.Load(), "reading writes nothing to Kubernetes")

	assert.Equal(t, 2.0, gauge(t, "runai_webhook_project_gpus", map[string]string{"project": "team", "kind": "deserved"}))
	assert.Equal(t, 1.5, gauge(t, "runai_webhook_project_gpus", map[string]string{"project": "team", "kind": "allocated"}))

	// The pass's later allocation shows at the next read: nothing is cached.
	require.NoError(t, tb.sim.SetAllocation("team", 3, 3))
	_, body = tb.get(t, gpuview.NamespacePath("team"), "tok-alice")
	v = decode[gpuview.NamespaceView](t, body)
	assert.Equal(t, f(0), v.AvailableNonPreemptible, "more held than deserved: 0, not negative")
}

func gauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	next:
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

func TestHandlerUnboundNamespaceHasNoSideEffect(t *testing.T) {
	tb := newTestbed(t, true)
	tb.sim.ResetCalls()
	code, body := tb.get(t, gpuview.NamespacePath("fresh"), "tok-root")
	require.Equal(t, http.StatusOK, code, string(body))
	v := decode[gpuview.NamespaceView](t, body)
	assert.Equal(t, gpuview.StatusNotBound, v.Status)
	assert.Nil(t, v.Deserved)
	assert.Nil(t, v.ReadAt)
	assert.False(t, v.TerminalGPUsAllowed)
	assert.Empty(t, tb.sim.Calls(), "an unbound namespace's view asks Run:ai nothing")
	assert.Zero(t, tb.writes.Load(), "and writes nothing to Kubernetes")
	var ns corev1.Namespace
	require.NoError(t, tb.k8s.Get(context.Background(), client.ObjectKey{Name: "fresh"}, &ns))
	assert.Empty(t, ns.Labels[queueKey], "still unbound")
	_, ok := tb.sim.ProjectByName("fresh")
	assert.False(t, ok, "no project was created")
}

func TestHandlerRunAIDownAnswersUnreachableWithNullNumbers(t *testing.T) {
	tb := newTestbed(t, true)
	code, _ := tb.get(t, gpuview.NamespacePath("team"), "tok-alice") // warm the binder's caches
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, tb.sim.SetDown(true))
	t.Cleanup(func() { _ = tb.sim.SetDown(false) })

	code, body := tb.get(t, gpuview.NamespacePath("team"), "tok-alice")
	require.Equal(t, http.StatusOK, code, string(body))
	raw := decode[map[string]any](t, body)
	assert.Equal(t, gpuview.StatusUnreachable, raw["status"])
	for _, k := range []string{"deserved", "allocated", "allocated_non_preemptible", "available_non_preemptible", "available_preemptible", "read_at"} {
		assert.Contains(t, raw, k)
		assert.Nil(t, raw[k], "%s is null, never an old number", k)
	}
	assert.Equal(t, false, raw["terminal_gpus_allowed"])
	assert.Equal(t, "team", raw["project"])

	code, body = tb.get(t, gpuview.PathAdmin, "tok-root")
	require.Equal(t, http.StatusOK, code, string(body))
	admin := decode[gpuview.AdminView](t, body)
	assert.Equal(t, gpuview.StatusUnreachable, admin.Status)
	for _, p := range admin.Projects {
		assert.Nil(t, p.GPUQuota, p.Namespace)
	}
}

func TestHandlerAccessAndErrors(t *testing.T) {
	tb := newTestbed(t, true)
	cases := []struct {
		name, method, path, header, token string
		code                              int
		message                           string
	}{
		{"no token", "GET", gpuview.NamespacePath("team"), "", "", 401, "bearer token is required"},
		{"invalid token", "GET", gpuview.NamespacePath("team"), "Authorization", "tok-nobody", 401, "not valid"},
		{"not a bearer token", "GET", gpuview.NamespacePath("team"), "Authorization", "", 401, "bearer token is required"},
		{"another namespace", "GET", gpuview.NamespacePath("mkt"), "Authorization", "tok-alice", 403, `user "alice" may not get gpuavailability.runai-webhook.hopsworks.ai in namespace "mkt"`},
		{"a namespace that does not exist, without rights there", "GET", gpuview.NamespacePath("ghost"), "Authorization", "tok-alice", 403, "may not get"},
		{"admin view without the admin role", "GET", gpuview.PathAdmin, "Authorization", "tok-alice", 403, "may not get runaiadmin.runai-webhook.hopsworks.ai cluster-wide"},
		{"unknown namespace", "GET", gpuview.NamespacePath("nowhere"), "Authorization", "tok-root", 404, "namespace nowhere does not exist"},
		{"namespace not managed", "GET", gpuview.NamespacePath("plain"), "Authorization", "tok-root", 404, "not a Hopsworks project"},
		{"POST", "POST", gpuview.NamespacePath("team"), "Authorization", "tok-alice", 405, "method POST is not allowed"},
		{"DELETE on the admin view", "DELETE", gpuview.PathAdmin, "Authorization", "tok-root", 405, "read with GET"},
		{"not a namespace name", "GET", gpuview.NamespacePath("Team_1"), "Authorization", "tok-root", 400, "is not a namespace name"},
		{"unknown path", "GET", "/api/v1/namespaces/team/pods", "Authorization", "tok-root", 404, "no view at"},
		{"token through the service proxy header", "GET", gpuview.NamespacePath("team"), gpuview.ForwardedAuthorizationHeader, "tok-alice", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			header := tc.header
			if header == "" {
				header = "Authorization"
			}
			req, err := http.NewRequest(tc.method, tb.srv.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.token != "" {
				req.Header.Set(header, "Bearer "+tc.token)
			} else if tc.header != "" {
				req.Header.Set(header, "Basic dXNlcjpwYXNz")
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			require.Equal(t, tc.code, resp.StatusCode, string(body))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			if tc.code == 200 {
				return
			}
			e := decode[gpuview.ErrorBody](t, body)
			assert.Equal(t, tc.code, e.Code)
			assert.Equal(t, http.StatusText(tc.code), e.Reason)
			assert.Contains(t, e.Message, tc.message)
			switch tc.code {
			case 401:
				assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
			case 405:
				assert.Equal(t, "GET", resp.Header.Get("Allow"))
			}
		})
	}
	t.Run("the Kubernetes API cannot check the token", func(t *testing.T) {
		tb.auth.down.Store(true)
		defer tb.auth.down.Store(false)
		code, body := tb.get(t, gpuview.NamespacePath("team"), "tok-alice")
		assert.Equal(t, http.StatusServiceUnavailable, code, string(body))
	})
	assert.Zero(t, tb.sim.CountWrites())
	assert.Zero(t, tb.writes.Load())
}

func TestHandlerAdminView(t *testing.T) {
	tb := newTestbed(t, true)
	tb.sim.ResetCalls()
	code, body := tb.get(t, gpuview.PathAdmin, "tok-root")
	require.Equal(t, http.StatusOK, code, string(body))
	v := decode[gpuview.AdminView](t, body)
	assert.Equal(t, gpuview.StatusOK, v.Status, v.Message)
	assert.True(t, v.Enabled)

	depts := map[string]gpuview.DepartmentRow{}
	for _, d := range v.Departments {
		depts[d.Name] = d
	}
	assert.Equal(t, gpuview.StatusNotLinked, depts["marketing"].Status)
	assert.Equal(t, "default", depts["marketing"].ProjectsGoTo)
	assert.Equal(t, gpuview.StatusOK, depts["research"].Status)
	assert.Equal(t, f(8), depts["research"].GPUQuota)
	assert.Equal(t, f(1.5), depts["research"].AllocatedGPUs)
	assert.Equal(t, 2, depts["research"].Namespaces)
	assert.Contains(t, depts, "", "the default department is always listed")

	rows := map[string]gpuview.ProjectRow{}
	for _, p := range v.Projects {
		rows[p.Namespace] = p
	}
	assert.Len(t, rows, 3, "managed namespaces only")
	assert.Equal(t, gpuview.StatusNotLinked, rows["fresh"].Status)
	assert.Equal(t, gpuview.StatusOK, rows["team"].Status)
	assert.Equal(t, f(2), rows["team"].GPUQuota)
	assert.Equal(t, f(1.5), rows["team"].AllocatedGPUs)
	assert.Equal(t, gpuview.StatusOK, rows["mkt"].Status)
	assert.Equal(t, "default", rows["mkt"].Department)

	// Read-only, and each list read once.
	assert.Zero(t, tb.sim.CountWrites())
	assert.Equal(t, 1, countGET(tb.sim, "/api/v1/org-unit/projects"))
	assert.Equal(t, 1, countGET(tb.sim, "/api/v1/org-unit/departments"))
	assert.Zero(t, tb.writes.Load())
}

func countGET(sim *runaitest.Server, path string) int {
	n := 0
	for _, c := range sim.Calls() {
		if c.Method == http.MethodGet && strings.TrimRight(c.Path, "/") == path {
			n++
		}
	}
	return n
}

func TestHandlerIntegrationOffReportsBindingLeftWithoutRunAI(t *testing.T) {
	tb := newTestbed(t, false)
	tb.sim.ResetCalls()
	code, body := tb.get(t, gpuview.NamespacePath("team"), "tok-alice")
	require.Equal(t, http.StatusOK, code, string(body))
	v := decode[gpuview.NamespaceView](t, body)
	assert.Equal(t, gpuview.StatusBindingLeft, v.Status)
	assert.Equal(t, "team", v.Project)
	assert.Nil(t, v.Deserved)

	_, body = tb.get(t, gpuview.NamespacePath("fresh"), "tok-root")
	assert.Equal(t, gpuview.StatusNotBound, decode[gpuview.NamespaceView](t, body).Status)

	code, body = tb.get(t, gpuview.PathAdmin, "tok-root")
	require.Equal(t, http.StatusOK, code)
	admin := decode[gpuview.AdminView](t, body)
	assert.Equal(t, gpuview.StatusBindingLeft, admin.Status)
	assert.False(t, admin.Enabled)
	assert.Empty(t, tb.sim.Calls(), "the integration is off: Run:ai is never called")
}

func TestHandlerBoundsEachRequest(t *testing.T) {
	tb := newTestbed(t, true)
	code, _ := tb.get(t, gpuview.NamespacePath("team"), "tok-alice")
	require.Equal(t, http.StatusOK, code)
	tb.sim.SetLatency(2 * time.Second)
	defer tb.sim.SetLatency(0)
	slow := httptest.NewServer(gpuview.NewHandler(gpuview.Deps{Service: tb.svc, Authenticator: tb.auth, Authorizer: tb.auth, Timeout: 300 * time.Millisecond, Log: logr.Discard()}))
	defer slow.Close()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodGet, slow.URL+gpuview.NamespacePath("team"), nil)
	req.Header.Set("Authorization", "Bearer tok-alice")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	v := decode[gpuview.NamespaceView](t, must(io.ReadAll(resp.Body)))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, gpuview.StatusUnreachable, v.Status, "a slow Run:ai is reported, not waited for")
	assert.Less(t, time.Since(start), 1500*time.Millisecond)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestBearerToken(t *testing.T) {
	h := http.Header{}
	_, ok := gpuview.BearerToken(h)
	assert.False(t, ok)
	h.Set(gpuview.ForwardedAuthorizationHeader, "Bearer fwd")
	tok, ok := gpuview.BearerToken(h)
	assert.True(t, ok)
	assert.Equal(t, "fwd", tok)
	h.Set("Authorization", "bearer direct")
	tok, _ = gpuview.BearerToken(h)
	assert.Equal(t, "direct", tok, "Authorization wins")
	h.Set("Authorization", "Basic x")
	_, ok = gpuview.BearerToken(h)
	assert.False(t, ok, "a non-bearer Authorization is refused, not skipped")
}
