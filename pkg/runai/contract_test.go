package runai_test

// Contract tests: the real client talks to the simulator through a
// middleware that validates every request the client sends and every answer
// the simulator gives against NVIDIA's Run:ai OpenAPI document. A green run
// means both sides speak the vendor's documented wire format, so neither can
// drift into agreeing with the other on something Run:ai would refuse.
//
// The document is read from RUNAI_OPENAPI (default ../shared/runai/openapi.json
// next to the repository root) and never copied into the repository. Only
// the operations we use are validated: doc.Validate on the whole document
// fails on vendor defects unrelated to us (see ../shared/runai/README.md).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

var (
	contractDocOnce sync.Once
	contractDoc     *openapi3.T
	contractDocErr  error
)

// openAPIPath is RUNAI_OPENAPI, else ../shared/runai/openapi.json relative
// to the directory holding go.mod (found by walking up from the package dir).
func openAPIPath() string {
	if p := os.Getenv("RUNAI_OPENAPI"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("..", "shared", "runai", "openapi.json")
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "runai", "openapi.json")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join("..", "shared", "runai", "openapi.json")
		}
		dir = parent
	}
}

// loadContractDoc loads the vendor document once per test binary, or skips.
func loadContractDoc(t *testing.T) *openapi3.T {
	t.Helper()
	path := openAPIPath()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("RUNAI_OPENAPI: %s not found; contract tests need NVIDIA's Run:ai OpenAPI document", path)
	}
	contractDocOnce.Do(func() {
		contractDoc, contractDocErr = openapi3.NewLoader().LoadFromFile(path)
		if contractDocErr != nil {
			contractDocErr = fmt.Errorf("load %s: %w", path, contractDocErr)
		}
	})
	require.NoError(t, contractDocErr)
	return contractDoc
}

// exchange is one request/response pair seen by the validating middleware.
type exchange struct {
	method, path   string // path is the vendor template, e.g. /api/v1/org-unit/projects/{projectId}
	reqViolations  []string
	status         int
	respViolations []string
	respSkipped    string // why the answer was not validated, if it was not
}

func (e exchange) String() string {
	req := "request OK"
	if len(e.reqViolations) > 0 {
		req = "request violations: " + strings.Join(e.reqViolations, "; ")
	}
	resp := fmt.Sprintf("response %d OK", e.status)
	switch {
	case e.respSkipped != "":
		resp = fmt.Sprintf("response %d not validated (%s)", e.status, e.respSkipped)
	case len(e.respViolations) > 0:
		resp = fmt.Sprintf("response %d violations: %s", e.status, strings.Join(e.respViolations, "; "))
	}
	return fmt.Sprintf("operation %s %s: %s, %s", e.method, e.path, req, resp)
}

// contract is a simulator behind the validating middleware.
type contract struct {
	t      *testing.T
	sim    *runaitest.Server
	ts     *httptest.Server
	router routers.Router

	mu        sync.Mutex
	exchanges []exchange
}

func newContract(t *testing.T, seed runaitest.Seed) *contract {
	t.Helper()
	doc := loadContractDoc(t)
	c := &contract{t: t, sim: runaitest.New(seed)}
	c.ts = httptest.NewServer(c)
	t.Cleanup(c.ts.Close)
	// A shallow copy whose servers point at this test server, so the router
	// matches the requests the client sends here; the shared document is
	// not modified.
	d := *doc
	d.Servers = openapi3.Servers{{URL: c.ts.URL}}
	router, err := gorillamux.NewRouter(&d)
	require.NoError(t, err, "build router from the vendor document")
	c.router = router
	return c
}

func (c *contract) client(t *testing.T) *runai.Client {
	t.Helper()
	seed := c.sim.Seed()
	cl, err := runai.NewClient(runai.ClientConfig{
		BaseURL: c.ts.URL, ClientID: seed.ClientID, ClientSecret: seed.ClientSecret,
		ClusterName: seed.Cluster.Name, PollInterval: 10 * time.Millisecond,
		HTTPClient: c.ts.Client(),
	})
	require.NoError(t, err)
	return cl
}

func (c *contract) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ex := exchange{method: r.Method, path: r.URL.Path}

	// The router matches scheme and host of doc.Servers; a server-side
	// request has neither in its URL.
	vreq := r.Clone(ctx)
	vreq.URL.Scheme, vreq.URL.Host = "http", r.Host
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.router.FindRoute(vreq)
	var in *openapi3filter.RequestValidationInput
	if err != nil {
		ex.reqViolations = append(ex.reqViolations, "no such operation in the vendor document: "+err.Error())
	} else {
		ex.path = route.Path
		in = &openapi3filter.RequestValidationInput{
			Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{
				AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
				MultiError:          true,
				SkipSettingDefaults: true,
			},
		}
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			ex.reqViolations = append(ex.reqViolations, flatten(err)...)
		}
		ex.reqViolations = append(ex.reqViolations, explodeViolations(route, vreq)...)
	}

	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	c.sim.Handler().ServeHTTP(rec, r)
	ex.status = rec.Code

	switch {
	case in == nil:
		ex.respSkipped = "no operation to validate against"
	case r.URL.Path == runai.TokenPathV2 && rec.Code == http.StatusNotFound && !v2Enabled(c.sim.Seed()):
		// The seed models a control plane without the OAuth2 endpoint; a 404
		// from a path that does not exist there is not a document answer.
		ex.respSkipped = "v2 token endpoint disabled by the seed"
	default:
		rin := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Options: &openapi3filter.Options{
				AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
				MultiError:            true,
				IncludeResponseStatus: true, // an undeclared status is a violation too
			},
		}
		rin.SetBodyBytes(rec.Body.Bytes())
		if err := openapi3filter.ValidateResponse(ctx, rin); err != nil {
			ex.respViolations = append(ex.respViolations, flatten(err)...)
		}
	}

	c.mu.Lock()
	c.exchanges = append(c.exchanges, ex)
	c.mu.Unlock()

	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func v2Enabled(s runaitest.Seed) bool { return s.V2TokenEnabled == nil || *s.V2TokenEnabled }

// explodeViolations catches what kin-openapi lets through silently: an
// explode:false array parameter (filterBy, groupBy) sent as repeated
// parameters. The document's serialization is one comma-separated value; a
// server that follows it reads only the first value (kin-openapi does the
// same), so the other filters would be ignored.
func explodeViolations(route *routers.Route, req *http.Request) []string {
	var out []string
	q := req.URL.Query()
	params := append(openapi3.Parameters{}, route.PathItem.Parameters...)
	params = append(params, route.Operation.Parameters...)
	for _, pr := range params {
		p := pr.Value
		if p == nil || p.In != openapi3.ParameterInQuery || p.Explode == nil || *p.Explode {
			continue
		}
		if n := len(q[p.Name]); n > 1 {
			out = append(out, fmt.Sprintf("query parameter %s is declared explode:false (one comma-separated value) but was sent %d times; a server following the document reads only %q",
				p.Name, n, q[p.Name][0]))
		}
	}
	return out
}

// flatten splits kin-openapi's MultiError into one line per violation.
func flatten(err error) []string {
	var me openapi3.MultiError
	if errors.As(err, &me) {
		var out []string
		for _, e := range me {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []string{strings.Join(strings.Fields(err.Error()), " ")}
}

// report logs one line per exchange since the last report, fails on any
// violation, and checks that each wanted operation ("METHOD /template
// STATUS") was exercised.
func (c *contract) report(t *testing.T, want ...string) {
	t.Helper()
	c.mu.Lock()
	exs := c.exchanges
	c.exchanges = nil
	c.mu.Unlock()
	seen := map[string]bool{}
	for _, ex := range exs {
		t.Logf("%s", ex)
		seen[fmt.Sprintf("%s %s %d", ex.method, ex.path, ex.status)] = true
		assert.Empty(t, ex.reqViolations, "request of %s %s", ex.method, ex.path)
		assert.Empty(t, ex.respViolations, "response %d of %s %s", ex.status, ex.method, ex.path)
	}
	for _, w := range want {
		assert.True(t, seen[w], "operation %q was not exercised", w)
	}
}

func contractSeed() runaitest.Seed {
	return runaitest.Seed{
		Cluster:     runaitest.ClusterSeed{Name: "contract"},
		Departments: []runaitest.DepartmentSeed{{Name: "research", DeservedGPUs: 8}, {Name: "ops"}, {Name: "ml"}},
		NodePools:   []runaitest.NodePoolSeed{{Name: "default", TotalGPUs: 16}, {Name: "a100", TotalGPUs: 8}},
		Projects: []runaitest.ProjectSeed{
			{Name: "legacy", Department: "research", Namespace: "legacy", DeservedGPUs: 4, Allocated: 2, AllocatedNonPreemptible: 1},
			{Name: "old-team", Department: "ops", DeservedGPUs: 1},
		},
		MaxPageSize: 2, // every list takes several pages: next is exercised
	}
}

func contractCreateRequest(sim *runaitest.Server, name, parentID string) runai.ProjectCreationRequest {
	np := sim.DefaultNodePool()
	deserved := 2.0
	req := runai.ProjectCreationRequest{
		Name: name, ClusterID: sim.Cluster().UUID, RequestedNamespace: name,
		Resources: []runai.Resources{{NodePool: &runai.NodePoolRef{ID: np.ID, Name: np.Name}, GPU: runai.ResourceAmount{Deserved: &deserved}}},
	}
	if parentID != "" {
		req.ParentID = &parentID
	}
	return req
}

func TestContractTokenV2(t *testing.T) {
	c := newContract(t, contractSeed())
	_, err := c.client(t).Cluster(context.Background())
	require.NoError(t, err)
	c.report(t, "POST /api/v2/token 200", "GET /api/v1/clusters 200")
}

func TestContractTokenV1(t *testing.T) {
	seed := contractSeed()
	seed.V2TokenEnabled = runaitest.Bool(false)
	c := newContract(t, seed)
	_, err := c.client(t).Cluster(context.Background())
	require.NoError(t, err)
	c.report(t, "POST /api/v2/token 404", "POST /api/v1/token 200", "GET /api/v1/clusters 200")
}

func TestContractListClusters(t *testing.T) {
	c := newContract(t, contractSeed())
	cl, err := c.client(t).Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, c.sim.Cluster().UUID, cl.UUID)
	c.report(t, "GET /api/v1/clusters 200")
}

func TestContractListNodePools(t *testing.T) {
	c := newContract(t, contractSeed())
	np, err := c.client(t).DefaultNodePool(context.Background(), c.sim.Cluster().UUID)
	require.NoError(t, err)
	assert.Equal(t, c.sim.DefaultNodePool().ID, np.ID)
	c.report(t, "GET /api/v1/node-pools 200")
}

func TestContractListDepartments(t *testing.T) {
	c := newContract(t, contractSeed())
	cl := c.client(t)
	ctx := context.Background()
	all, err := cl.ListDepartments(ctx, c.sim.Cluster().UUID, "")
	require.NoError(t, err)
	assert.Len(t, all, 4, "default, research, ops, ml over two pages")
	one, err := cl.ListDepartments(ctx, c.sim.Cluster().UUID, "research")
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.NotNil(t, one[0].Status, "verbose carries status")
	assert.Equal(t, 2.0, one[0].Status.QuotaStatus.Allocated.GPU)
	c.report(t, "GET /api/v1/org-unit/departments 200")
}

func TestContractGetDepartment(t *testing.T) {
	c := newContract(t, contractSeed())
	research, _ := c.sim.DepartmentByName("research")
	d, err := c.client(t).GetDepartment(context.Background(), research.ID)
	require.NoError(t, err)
	assert.Equal(t, "research", d.Name)
	require.NotNil(t, d.Status)
	assert.NotEmpty(t, d.Status.NodePoolQuotaStatuses)
	c.report(t, "GET /api/v1/org-unit/departments/{departmentId} 200")
}

func TestContractListProjects(t *testing.T) {
	seed := contractSeed()
	for _, n := range []string{"p1", "p2", "p3"} {
		seed.Projects = append(seed.Projects, runaitest.ProjectSeed{Name: n})
	}
	c := newContract(t, seed)
	cl := c.client(t)
	ctx := context.Background()
	all, err := cl.ListProjects(ctx, c.sim.Cluster().UUID, "")
	require.NoError(t, err)
	assert.Len(t, all, 5, "three pages of two")
	one, err := cl.ListProjects(ctx, c.sim.Cluster().UUID, "legacy")
	require.NoError(t, err)
	require.Len(t, one, 1)
	assert.Equal(t, "legacy", one[0].BoundNamespace())
	c.report(t, "GET /api/v1/org-unit/projects 200")
}

func TestContractGetProject(t *testing.T) {
	c := newContract(t, contractSeed())
	legacy, _ := c.sim.ProjectByName("legacy")
	p, err := c.client(t).GetProject(context.Background(), legacy.ID)
	require.NoError(t, err)
	assert.Equal(t, "legacy", p.Name)
	assert.Equal(t, runai.PhaseReady, p.Status.Phase)
	c.report(t, "GET /api/v1/org-unit/projects/{projectId} 200")
}

func TestContractCreateProject(t *testing.T) {
	seed := contractSeed()
	seed.CreateDelay = time.Minute
	c := newContract(t, seed)
	cl := c.client(t)
	ctx := context.Background()
	research, _ := c.sim.DepartmentByName("research")

	p, err := cl.CreateProject(ctx, contractCreateRequest(c.sim, "team-a", research.ID))
	require.NoError(t, err)
	assert.Equal(t, runai.PhaseCreating, p.Status.Phase)
	assert.Nil(t, p.Status.Namespace)

	// Without parentId (the default department) and with optional fields set.
	req := contractCreateRequest(c.sim, "team-b", "")
	enforce := true
	req.EnforceRunaiScheduler, req.DefaultNodePools, req.Description = &enforce, []string{"default"}, "created by the contract test"
	p, err = cl.CreateProject(ctx, req)
	require.NoError(t, err)
	def, _ := c.sim.DepartmentByName("default")
	assert.Equal(t, def.ID, p.ParentID)

	c.sim.Advance(time.Minute)
	p, err = cl.GetProject(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, "team-b", p.BoundNamespace())
	c.report(t, "POST /api/v1/org-unit/projects 201")
}

func TestContractDeleteProject(t *testing.T) {
	seed := contractSeed()
	seed.DeleteDelay = time.Minute
	c := newContract(t, seed)
	cl := c.client(t)
	ctx := context.Background()
	legacy, _ := c.sim.ProjectByName("legacy")
	require.NoError(t, cl.DeleteProject(ctx, legacy.ID))
	p, err := cl.GetProject(ctx, legacy.ID)
	require.NoError(t, err)
	assert.Equal(t, runai.PhaseDeleting, p.Status.Phase)

	c.sim.SetDeleteDelay(0)
	old, _ := c.sim.ProjectByName("old-team")
	require.NoError(t, cl.DeleteProject(ctx, old.ID))
	c.report(t, "DELETE /api/v1/org-unit/projects/{projectId} 202", "DELETE /api/v1/org-unit/projects/{projectId} 204")
}

func TestContractGetProjectAfterDelete(t *testing.T) {
	seed := contractSeed()
	seed.DeleteDelay = 50 * time.Millisecond
	c := newContract(t, seed)
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	legacy, _ := c.sim.ProjectByName("legacy")
	require.NoError(t, cl.DeleteProject(ctx, legacy.ID))
	require.NoError(t, cl.WaitProjectGone(ctx, legacy.ID))
	_, err := cl.GetProject(ctx, legacy.ID)
	require.Error(t, err)
	assert.True(t, runai.IsNotFound(err), "got %v", err)
	c.report(t, "GET /api/v1/org-unit/projects/{projectId} 404")
}

func TestContractNodesTelemetry(t *testing.T) {
	c := newContract(t, contractSeed())
	free, err := c.client(t).FreeGPUs(context.Background(), c.sim.Cluster().UUID, "default")
	require.NoError(t, err)
	assert.Equal(t, 14.0, free, "16 GPUs minus legacy's 2")
	require.NoError(t, c.sim.SetFreeGPUs("a100", 3))
	free, err = c.client(t).FreeGPUs(context.Background(), c.sim.Cluster().UUID, "a100")
	require.NoError(t, err)
	assert.Equal(t, 3.0, free)
	c.report(t, "GET /api/v1/nodes/telemetry 200")
}

// TestContractErrorBodies checks that the simulator's error answers carry the
// bodies the document declares for them, and that the client reads them.
func TestContractErrorBodies(t *testing.T) {
	c := newContract(t, contractSeed())
	cl := c.client(t)
	ctx := context.Background()
	research, _ := c.sim.DepartmentByName("research")

	_, err := cl.CreateProject(ctx, contractCreateRequest(c.sim, "legacy", research.ID))
	assert.True(t, runai.IsConflict(err), "duplicate name: %v", err)
	req := contractCreateRequest(c.sim, "newcomer", research.ID)
	req.RequestedNamespace = "legacy"
	_, err = cl.CreateProject(ctx, req)
	assert.True(t, runai.IsConflict(err), "namespace held by another project: %v", err)
	_, err = cl.CreateProject(ctx, contractCreateRequest(c.sim, "Not_A_Name", research.ID))
	assert.True(t, runai.IsInvalid(err), "invalid name: %v", err)

	_, err = cl.GetProject(ctx, "999999")
	assert.True(t, runai.IsNotFound(err), "%v", err)
	_, err = cl.GetDepartment(ctx, "999999")
	assert.True(t, runai.IsNotFound(err), "%v", err)

	// A revoked token: the first answer is 401, the client refreshes once and succeeds.
	c.sim.RevokeTokens()
	_, err = cl.GetDepartment(ctx, research.ID)
	require.NoError(t, err)

	// Wrong credentials: the OAuth2 endpoint answers 401 with an OAuth2Error.
	bad, err := runai.NewClient(runai.ClientConfig{BaseURL: c.ts.URL, ClientID: "intruder", ClientSecret: "wrong", HTTPClient: c.ts.Client()})
	require.NoError(t, err)
	_, err = bad.Cluster(ctx)
	require.Error(t, err)

	c.report(t,
		"POST /api/v1/org-unit/projects 409",
		"POST /api/v1/org-unit/projects 400",
		"GET /api/v1/org-unit/projects/{projectId} 404",
		"GET /api/v1/org-unit/departments/{departmentId} 404",
		"GET /api/v1/org-unit/departments/{departmentId} 401",
		"POST /api/v2/token 401",
	)
}

// TestContractSimulatorRawRequests validates simulator answers the client
// does not (yet) ask for, with requests written in the document's own
// serialization: brief department lists, comma-separated filterBy, the
// clientId spelling of the v1 token request, telemetry grouped two ways, a
// project in phase Deleting, one cluster by UUID, and 401s of every kind.
func TestContractSimulatorRawRequests(t *testing.T) {
	seed := contractSeed()
	seed.DeleteDelay = time.Minute
	c := newContract(t, seed)
	hc := c.ts.Client()
	send := func(method, path, contentType, body, token string) int {
		t.Helper()
		req, err := http.NewRequest(method, c.ts.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	s := c.sim.Seed()
	v1 := fmt.Sprintf(`{"grantType":"client_credentials","clientId":%q,"clientSecret":%q}`, s.ClientID, s.ClientSecret)
	require.Equal(t, http.StatusOK, send(http.MethodPost, runai.TokenPathV1, "application/json", v1, ""))
	form := "grant_type=client_credentials&client_id=" + s.ClientID + "&client_secret=" + s.ClientSecret
	req, _ := http.NewRequest(http.MethodPost, c.ts.URL+runai.TokenPathV2, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	var tok runai.TokenResponseV2
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tok))
	resp.Body.Close()

	uuid := c.sim.Cluster().UUID
	legacy, _ := c.sim.ProjectByName("legacy")
	require.Equal(t, http.StatusAccepted, send(http.MethodDelete, "/api/v1/org-unit/projects/"+legacy.ID, "", "", tok.AccessToken))
	for _, path := range []string{
		"/api/v1/clusters?verbosity=metadata",
		"/api/v1/clusters/" + uuid,
		"/api/v1/node-pools?filterBy=" + url.QueryEscape("clusterId=="+uuid+",name==a100"),
		"/api/v1/org-unit/departments?verbosity=brief&limit=1&offset=1",
		"/api/v1/org-unit/departments?filterBy=" + url.QueryEscape("clusterId=="+uuid+",name==research") + "&verbosity=verbose",
		"/api/v1/org-unit/projects?filterBy=" + url.QueryEscape("clusterId=="+uuid+",parentName==research") + "&sortBy=name&sortOrder=desc",
		"/api/v1/org-unit/projects/" + legacy.ID,
		"/api/v1/nodes/telemetry?telemetryType=TOTAL_GPUS&clusterId=" + uuid + "&groupBy=" + url.QueryEscape("ClusterId,Nodepool"),
		"/api/v1/nodes/telemetry?telemetryType=ALLOCATED_GPUS",
	} {
		assert.Equal(t, http.StatusOK, send(http.MethodGet, path, "", "", tok.AccessToken), path)
	}
	assert.Equal(t, http.StatusNotFound, send(http.MethodGet, "/api/v1/clusters/00000000-0000-4000-8000-000000000000", "", "", tok.AccessToken))
	assert.Equal(t, http.StatusBadRequest, send(http.MethodGet, "/api/v1/org-unit/projects?offset=-1", "", "", tok.AccessToken), "valid for the document, refused by the server")
	for _, path := range []string{"/api/v1/clusters", "/api/v1/node-pools", "/api/v1/org-unit/departments", "/api/v1/org-unit/projects", "/api/v1/nodes/telemetry?telemetryType=FREE_GPUS"} {
		assert.Equal(t, http.StatusUnauthorized, send(http.MethodGet, path, "", "", ""), path)
	}
	assert.Equal(t, http.StatusUnauthorized, send(http.MethodPost, "/api/v1/org-unit/projects", "application/json", `{"name":"x","clusterId":"`+uuid+`","resources":[]}`, "expired"))
	c.report(t,
		"POST /api/v1/token 200",
		"DELETE /api/v1/org-unit/projects/{projectId} 202",
		"GET /api/v1/clusters/{clusterUuid} 200",
		"GET /api/v1/clusters/{clusterUuid} 404",
		"GET /api/v1/org-unit/projects 400",
		"GET /api/v1/nodes/telemetry 401",
		"POST /api/v1/org-unit/projects 401",
	)
}
