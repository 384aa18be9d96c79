package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/gpuview"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

type tokenAuth map[string]string // token -> user; alice may view team, root everything

func (a tokenAuth) Authenticate(_ context.Context, token string) (gpuview.User, bool, error) {
	u, ok := a[token]
	return gpuview.User{Name: u}, ok, nil
}

func (a tokenAuth) Authorize(_ context.Context, u gpuview.User, acc gpuview.Access) (bool, string, error) {
	return u.Name == "root" || (u.Name == "alice" && acc.Namespace == "team"), "", nil
}

// viewServer is the views' handler over TLS, on the simulator, with
// namespace team (research, 2 deserved GPUs) and mkt (marketing, no twin).
func viewServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	sim := runaitest.Run(t, runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research", DeservedGPUs: 4}}})
	p := sim.AddProject(runaitest.ProjectSeed{Name: "team", Department: "research", Namespace: "team", DeservedGPUs: 2})
	sim.AddProject(runaitest.ProjectSeed{Name: "mkt", Department: "default", Namespace: "mkt", DeservedGPUs: 1})
	require.NoError(t, sim.SetAllocation("team", 1.5, 1))
	require.NoError(t, sim.SetFreeGPUs("default", 3))
	rc, err := runai.NewClient(runai.ClientConfig{BaseURL: sim.URL(), ClientID: runaitest.DefaultClientID, ClientSecret: runaitest.DefaultClientSecret, Logger: logr.Discard()})
	require.NoError(t, err)
	keys := nsview.Keys{Queue: "runai/queue", Project: "hopsworks.ai/project", Department: "hopsworks.ai/department"}
	k8s := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{keys.Project: "team", keys.Department: "research", keys.Queue: "team", nsview.ProjectIDLabel: p.ID}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mkt", Labels: map[string]string{keys.Project: "mkt", keys.Department: "marketing", keys.Queue: "mkt"}}},
	).Build()
	binder := &bind.Binder{RunAI: rc, Keys: keys, DefaultDepartment: "default", Enabled: true, Log: logr.Discard()}
	svc := &gpuview.Service{Keys: keys, Enabled: true, DefaultDepartment: "default", Namespaces: k8s, RunAI: rc, Lookups: binder}
	auth := tokenAuth{"tok-alice": "alice", "tok-root": "root"}
	srv := httptest.NewTLSServer(gpuview.NewHandler(gpuview.Deps{Service: svc, Authenticator: auth, Authorizer: auth, Log: logr.Discard()}))
	t.Cleanup(srv.Close)
	return srv, writeCA(t, srv)
}

func writeCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return path
}

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestGPUCommandDirect(t *testing.T) {
	srv, ca := viewServer(t)
	out, stderr, err := runCLI(t, "gpu", "-n", "team", "--server", srv.URL, "--ca-file", ca, "--token", "tok-alice")
	require.NoError(t, err, stderr)
	t.Logf("runai-webhook gpu -n team:\n%s", out)
	for _, want := range []string{
		"Namespace:", "team", "Run:ai department:", "research", "Status:", "OK",
		"Deserved GPUs:              2", "Allocated GPUs:             1.5", "Available non-preemptible:  1",
		"Available preemptible:      3", "Terminal:                   GPUs allowed", "Node pool:                  default",
	} {
		assert.Contains(t, out, want)
	}

	out, stderr, err = runCLI(t, "gpu", "-n", "team", "-o", "json", "--server", srv.URL, "--ca-file", ca, "--token", "tok-alice")
	require.NoError(t, err, stderr)
	var v gpuview.NamespaceView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.Equal(t, gpuview.StatusOK, v.Status)
	assert.Equal(t, 2.0, *v.Deserved)
	assert.True(t, strings.HasPrefix(out, "{\n  \""), "indented JSON")
}

func TestAdminCommandDirect(t *testing.T) {
	srv, ca := viewServer(t)
	out, stderr, err := runCLI(t, "admin", "--server", srv.URL, "--ca-file", ca, "--token", "tok-root")
	require.NoError(t, err, stderr)
	t.Logf("runai-webhook admin:\n%s", out)
	assert.Contains(t, out, "Run:ai: OK")
	assert.Contains(t, out, "HOPSWORKS DEPARTMENT")
	assert.Regexp(t, `marketing\s+1\s+no\s+-\s+-\s+-\s+Not linked in Run:ai \(projects go to default\)`, out)
	assert.Regexp(t, `research\s+1\s+yes\s+research\s+4\s+1\.5\s+OK`, out)
	assert.Regexp(t, `team\s+research\s+yes\s+team\s+research\s+2\s+1\.5\s+OK`, out)

	out, stderr, err = runCLI(t, "admin", "-o", "json", "--server", srv.URL, "--ca-file", ca, "--token", "tok-root")
	require.NoError(t, err, stderr)
	var v gpuview.AdminView
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	assert.Len(t, v.Projects, 2)

	// Without --token, the kubeconfig's bearer token is sent.
	kc := writeKubeconfig(t, srv, &clientcmdapi.AuthInfo{Token: "tok-root"})
	out, stderr, err = runCLI(t, "admin", "--server", srv.URL, "--ca-file", ca, "--kubeconfig", kc)
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "Run:ai: OK")
	certUser := writeKubeconfig(t, srv, &clientcmdapi.AuthInfo{ClientCertificateData: []byte("x"), ClientKeyData: []byte("y")})
	_, _, err = runCLI(t, "admin", "--server", srv.URL, "--ca-file", ca, "--kubeconfig", certUser)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no bearer token")
}

func TestViewCommandsReportServerErrors(t *testing.T) {
	srv, ca := viewServer(t)
	_, _, err := runCLI(t, "gpu", "-n", "mkt", "--server", srv.URL, "--ca-file", ca, "--token", "tok-alice")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `403 Forbidden: user "alice" may not get gpuavailability`)
	_, _, err = runCLI(t, "admin", "--server", srv.URL, "--ca-file", ca, "--token", "bogus")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401 Unauthorized")
	_, _, err = runCLI(t, "gpu", "-n", "team", "--server", srv.URL, "--token", "tok-alice")
	require.Error(t, err, "the test CA is not in the system roots")
	assert.Contains(t, err.Error(), "certificate")
}

func TestViewCommandsCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gpu"}, "-n NAMESPACE is required"},
		{[]string{"gpu", "-n", "a", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"admin", "--ca-file", "x"}, "--ca-file applies to --server only"},
		{[]string{"admin", "--server", "http://127.0.0.1:1"}, "want an https URL"},
		{[]string{"admin", "extra"}, "unexpected arguments: extra"},
	} {
		_, _, err := runCLI(t, tc.args...)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
	out, _, err := runCLI(t, "help")
	require.NoError(t, err)
	assert.Contains(t, out, "gpu -n NAMESPACE")
	assert.Contains(t, out, "admin [-o table|json]")
}

// fakeAPIServer stands in for the API server's service proxy: it checks the
// caller's credentials, drops Authorization as the real one does after
// authenticating, and forwards the rest to the webhook.
func fakeAPIServer(t *testing.T, webhook *httptest.Server, wantAuth string) *httptest.Server {
	t.Helper()
	prefix := "/api/v1/namespaces/runai-webhook/services/https:runai-webhook:443/proxy"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != wantAuth {
			http.Error(w, `{"kind":"Status","code":401,"reason":"Unauthorized","message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if !strings.HasPrefix(r.URL.Path, prefix) {
			http.Error(w, `{"kind":"Status","code":404,"message":"no proxy here"}`, http.StatusNotFound)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, webhook.URL+strings.TrimPrefix(r.URL.Path, prefix), nil)
		for k, v := range r.Header {
			if k != "Authorization" {
				req.Header[k] = v
			}
		}
		resp, err := webhook.Client().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeKubeconfig(t *testing.T, apiserver *httptest.Server, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: apiserver.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiserver.Certificate().Raw})}
	cfg.AuthInfos["u"] = user
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

func TestViewCommandsThroughTheServiceProxy(t *testing.T) {
	webhook, _ := viewServer(t)
	api := fakeAPIServer(t, webhook, "Bearer tok-root")
	kc := writeKubeconfig(t, api, &clientcmdapi.AuthInfo{Token: "tok-root"})

	out, stderr, err := runCLI(t, "gpu", "-n", "team", "--kubeconfig", kc, "-o", "json")
	require.NoError(t, err, stderr)
	var v gpuview.NamespaceView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.Equal(t, gpuview.StatusOK, v.Status, "the kubeconfig's token reached the webhook in %s", gpuview.ForwardedAuthorizationHeader)

	out, stderr, err = runCLI(t, "admin", "--kubeconfig", kc)
	require.NoError(t, err, stderr)
	assert.Contains(t, out, "Not linked in Run:ai")

	// --token is what the webhook sees; the kubeconfig still authenticates to the API server.
	_, _, err = runCLI(t, "admin", "--kubeconfig", kc, "--token", "tok-alice")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `403 Forbidden: user "alice"`)

	// Another Service name reaches nothing: the path is built from the flags.
	_, _, err = runCLI(t, "admin", "--kubeconfig", kc, "--service", "other")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404")

	// A client-certificate user has no token to pass on: said plainly.
	certUser := writeKubeconfig(t, api, &clientcmdapi.AuthInfo{ClientCertificateData: []byte("x"), ClientKeyData: []byte("y")})
	_, _, err = runCLI(t, "gpu", "-n", "team", "--kubeconfig", certUser)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pass --token")
}

func TestServiceProxyPath(t *testing.T) {
	assert.Equal(t, "/api/v1/namespaces/hops/services/https:rw:443/proxy", serviceProxyPath("hops", "rw"))
}
