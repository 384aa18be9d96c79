package runaitest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

func TestSeedFileLoadsWithDefaults(t *testing.T) {
	seed, err := runaitest.LoadSeed("testdata/seed.yaml")
	require.NoError(t, err)
	assert.Equal(t, "hops-gpu", seed.Cluster.Name)
	assert.Equal(t, 2*time.Second, seed.CreateDelay)
	assert.Equal(t, 3*time.Second, seed.DeleteDelay)
	assert.Equal(t, time.Hour, seed.TokenTTL)
	require.Len(t, seed.Departments, 3)
	assert.Equal(t, runaitest.DepartmentSeed{Name: "ml-platform", DeservedGPUs: 8}, seed.Departments[2])
	require.Len(t, seed.NodePools, 2)
	require.NotNil(t, seed.NodePools[1].FreeGPUs)

	s := runaitest.New(seed)
	p, ok := s.ProjectByName("legacy-team")
	require.True(t, ok)
	assert.Equal(t, runai.PhaseReady, p.Status.Phase)
	assert.Equal(t, "legacy-team", p.BoundNamespace())
	d, ok := s.DepartmentByName("research")
	require.True(t, ok)
	assert.Equal(t, d.ID, p.ParentID)
	assert.Equal(t, 2.0, d.Status.QuotaStatus.Allocated.GPU, "department sums its projects")
}

func TestSeedZeroValueIsUsable(t *testing.T) {
	s := runaitest.New(runaitest.Seed{})
	np := s.DefaultNodePool()
	assert.Equal(t, "default", np.Name)
	assert.True(t, np.IsDefault)
	_, ok := s.DepartmentByName("default")
	assert.True(t, ok, `the "default" department always exists`)
	assert.Equal(t, runaitest.DefaultClusterUUID, s.Cluster().UUID)
}

func TestSeedErrors(t *testing.T) {
	for name, yaml := range map[string]string{
		"unknown field":          "clustr: {name: x}\n",
		"bad duration":           "createDelay: soon\n",
		"bad department name":    "departments: [Research]\n",
		"unknown department":     "projects: [{name: p, department: nope}]\n",
		"duplicate namespace":    "projects: [{name: a, namespace: ns}, {name: b, namespace: ns}]\n",
		"two default node pools": "nodePools: [{name: a, isDefault: true}, {name: b, isDefault: true}]\n",
		"cluster uuid":           "cluster: {uuid: not-a-uuid}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := runaitest.ParseSeed([]byte(yaml))
			assert.Error(t, err)
		})
	}
	assert.Panics(t, func() { runaitest.New(runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "BAD"}}}) })
}

func TestStartRefusesNonLoopback(t *testing.T) {
	s := runaitest.New(runaitest.Seed{})
	err := s.Start("0.0.0.0:0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loopback")
}

func TestTokenEndpoints(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{ClientID: "cid", ClientSecret: "sec", TokenTTL: 90 * time.Second})
	hc := http.Client{Timeout: 5 * time.Second}

	t.Run("v2 form", func(t *testing.T) {
		resp, err := hc.PostForm(s.URL()+"/api/v2/token", url.Values{"grant_type": {"client_credentials"}, "client_id": {"cid"}, "client_secret": {"sec"}})
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		assert.NotEmpty(t, m["access_token"])
		assert.Equal(t, "Bearer", m["token_type"])
		assert.Equal(t, 90.0, m["expires_in"])
	})
	t.Run("v2 basic auth", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/api/v2/token", strings.NewReader("grant_type=client_credentials"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("cid", "sec")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
	t.Run("v2 bad secret is 401 invalid_client", func(t *testing.T) {
		resp, err := hc.PostForm(s.URL()+"/api/v2/token", url.Values{"grant_type": {"client_credentials"}, "client_id": {"cid"}, "client_secret": {"nope"}})
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		var m map[string]string
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		assert.Equal(t, "invalid_client", m["error"])
	})
	for _, idField := range []string{"clientID", "clientId"} {
		t.Run("v1 with "+idField, func(t *testing.T) {
			body := fmt.Sprintf(`{"grantType":"client_credentials",%q:"cid","clientSecret":"sec"}`, idField)
			resp, err := hc.Post(s.URL()+"/api/v1/token", "application/json", strings.NewReader(body))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var m map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
			assert.NotEmpty(t, m["accessToken"])
			assert.Equal(t, 90.0, m["expiresIn"])
		})
	}
	t.Run("v1 bad secret is 401", func(t *testing.T) {
		resp, err := hc.Post(s.URL()+"/api/v1/token", "application/json", strings.NewReader(`{"grantType":"client_credentials","clientID":"cid","clientSecret":"x"}`))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}

func TestV2TokenDisabledAnswers404(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{V2TokenEnabled: runaitest.Bool(false)})
	resp, err := http.PostForm(s.URL()+"/api/v2/token", url.Values{"grant_type": {"client_credentials"}, "client_id": {runaitest.DefaultClientID}, "client_secret": {runaitest.DefaultClientSecret}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, err = http.Post(s.URL()+"/api/v1/token", "application/json", strings.NewReader(
		fmt.Sprintf(`{"grantType":"client_credentials","clientID":%q,"clientSecret":%q}`, runaitest.DefaultClientID, runaitest.DefaultClientSecret)))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "v1 still works")
}

func TestBearerTokenRequired(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{})
	a := newAPI(t, s)
	good := a.token
	for name, tok := range map[string]string{"missing": "", "unknown": "sim.1.forged"} {
		t.Run(name, func(t *testing.T) {
			a.token = tok
			status, b := a.do(http.MethodGet, "/api/v1/clusters", nil)
			require.Equal(t, http.StatusUnauthorized, status)
			errorBody(t, 401, b)
		})
	}
	a.token = good
	status, _ := a.do(http.MethodGet, "/api/v1/clusters", nil)
	assert.Equal(t, http.StatusOK, status)
}

func TestTokenExpiryAndRevocation(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{TokenTTL: time.Minute})
	a := newAPI(t, s)
	status, _ := a.do(http.MethodGet, "/api/v1/clusters", nil)
	require.Equal(t, http.StatusOK, status)

	s.Advance(61 * time.Second)
	status, b := a.do(http.MethodGet, "/api/v1/clusters", nil)
	require.Equal(t, http.StatusUnauthorized, status, "expired after the TTL")
	assert.Contains(t, errorBody(t, 401, b), "expired")

	a.token = a.login(runaitest.DefaultClientID, runaitest.DefaultClientSecret)
	status, _ = a.do(http.MethodGet, "/api/v1/clusters", nil)
	require.Equal(t, http.StatusOK, status, "a new token works")

	s.RevokeTokens()
	status, _ = a.do(http.MethodGet, "/api/v1/clusters", nil)
	assert.Equal(t, http.StatusUnauthorized, status, "revoked")
}

func TestClustersAndNodePools(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{NodePools: []runaitest.NodePoolSeed{{Name: "default", TotalGPUs: 4}, {Name: "a100", TotalGPUs: 8}}})
	a := newAPI(t, s)

	status, b := a.do(http.MethodGet, "/api/v1/clusters", nil)
	require.Equal(t, http.StatusOK, status)
	var clusters []map[string]any
	require.NoError(t, json.Unmarshal(b, &clusters), "a bare array")
	require.Len(t, clusters, 1)
	for _, f := range []string{"uuid", "tenantId", "name", "createdAt"} {
		assert.Contains(t, clusters[0], f)
	}

	m := a.getJSON("/api/v1/node-pools?filterBy=clusterId==" + s.Cluster().UUID)
	pools := m["nodepools"].([]any)
	require.Len(t, pools, 2)
	for _, f := range []string{"id", "name", "labelKey", "labelValue", "clusterId", "tenantId", "clusterName", "createdBy", "createdAt", "updatedBy", "updatedAt", "isDefault"} {
		assert.Contains(t, pools[0], f)
	}
	assert.Equal(t, true, pools[0].(map[string]any)["isDefault"])
	assert.Equal(t, false, pools[1].(map[string]any)["isDefault"])

	m = a.getJSON("/api/v1/node-pools?filterBy=clusterId==00000000-0000-4000-8000-000000000000")
	assert.Empty(t, m["nodepools"])
}

// requiredProjectFields are the vendor schema's required Project fields.
var requiredProjectFields = []string{"id", "name", "parentId", "createdAt", "updatedAt", "totalResources", "effective", "status", "description", "enforceRunaiScheduler", "clusterId", "resources"}

func TestCreateProjectCreatingThenReady(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{CreateDelay: 10 * time.Second, Departments: []runaitest.DepartmentSeed{{Name: "research"}}})
	a := newAPI(t, s)
	research, _ := s.DepartmentByName("research")

	status, p := a.createProject(projectReq(s, "team-a", map[string]any{"parentId": research.ID}))
	require.Equal(t, http.StatusCreated, status, p)
	for _, f := range requiredProjectFields {
		assert.Contains(t, p, f)
	}
	st := p["status"].(map[string]any)
	assert.Equal(t, "Creating", st["phase"])
	assert.Nil(t, st["namespace"], "no namespace until the cluster bound it")
	assert.Equal(t, "team-a", p["requestedNamespace"])
	assert.Equal(t, research.ID, p["parentId"])
	assert.Equal(t, true, p["enforceRunaiScheduler"], "defaults to true")
	assert.Equal(t, 2.0, p["totalResources"].(map[string]any)["gpuQuota"])
	id := p["id"].(string)
	assert.Regexp(t, `^\d+$`, id)

	s.Advance(10 * time.Second)
	got := a.getJSON("/api/v1/org-unit/projects/" + id)
	st = got["status"].(map[string]any)
	assert.Equal(t, "Ready", st["phase"])
	assert.Equal(t, "team-a", st["namespace"])

	// Without parentId the project lands in "default"; without
	// requestedNamespace it gets runai-<name>.
	s.SetCreateDelay(0)
	status, p = a.createProject(projectReq(s, "team-b", map[string]any{"requestedNamespace": nil}))
	require.Equal(t, http.StatusCreated, status, p)
	def, _ := s.DepartmentByName("default")
	assert.Equal(t, def.ID, p["parentId"])
	assert.Equal(t, "Ready", p["status"].(map[string]any)["phase"], "no create delay: Ready at once")
	assert.Equal(t, "runai-team-b", p["status"].(map[string]any)["namespace"])
	assert.NotContains(t, p, "requestedNamespace")
	assert.Equal(t, runaitest.DefaultClientID, p["createdBy"])
}

func TestCreateProjectValidation(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{})
	a := newAPI(t, s)
	long := strings.Repeat("a", 64)
	cases := map[string]map[string]any{
		"missing name":         {"name": nil},
		"missing clusterId":    {"clusterId": nil},
		"missing resources":    {"resources": nil},
		"uppercase name":       {"name": "Team-A", "requestedNamespace": "team-a"},
		"name starts digit":    {"name": "1team", "requestedNamespace": "team-a"},
		"name ends dash":       {"name": "team-", "requestedNamespace": "team-a"},
		"name too long":        {"name": long, "requestedNamespace": "team-a"},
		"unknown clusterId":    {"clusterId": "00000000-0000-4000-8000-000000000000"},
		"unknown parentId":     {"parentId": "999999"},
		"unknown node pool":    {"resources": []any{map[string]any{"nodePool": map[string]any{"id": "999999"}, "gpu": map[string]any{"deserved": 1}}}},
		"bad namespace":        {"requestedNamespace": "Bad_NS"},
		"negative GPUs":        {"resources": []any{map[string]any{"gpu": map[string]any{"deserved": -1}}}},
		"unknown default pool": {"defaultNodePools": []string{"nope"}},
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			status, b := a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-a", extra))
			require.Equal(t, http.StatusBadRequest, status, string(b))
			errorBody(t, 400, b)
		})
	}
	status, b := a.do(http.MethodPost, "/api/v1/org-unit/projects", "{not json")
	assert.Equal(t, http.StatusBadRequest, status)
	errorBody(t, 400, b)
	assert.Empty(t, s.Projects(), "nothing was created")
	status, _ = a.createProject(projectReq(s, strings.Repeat("a", 63), map[string]any{"requestedNamespace": "ok"}))
	assert.Equal(t, http.StatusCreated, status, "63 characters is allowed")
}

func TestCreateProjectConflicts(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{DeleteDelay: 30 * time.Second,
		Projects: []runaitest.ProjectSeed{{Name: "adopted", Namespace: "ns-adopted"}}})
	a := newAPI(t, s)

	status, p := a.createProject(projectReq(s, "team-a", nil))
	require.Equal(t, http.StatusCreated, status)

	t.Run("duplicate name", func(t *testing.T) {
		status, b := a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-a", map[string]any{"requestedNamespace": "other"}))
		require.Equal(t, http.StatusConflict, status)
		assert.Contains(t, errorBody(t, 409, b), "already exists")
	})
	t.Run("namespace held by another project", func(t *testing.T) {
		status, b := a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-x", map[string]any{"requestedNamespace": "ns-adopted"}))
		require.Equal(t, http.StatusConflict, status)
		assert.Contains(t, errorBody(t, 409, b), `namespace "ns-adopted"`)
	})
	t.Run("name and namespace held by a project still Deleting", func(t *testing.T) {
		status, _ := a.do(http.MethodDelete, "/api/v1/org-unit/projects/"+p["id"].(string), nil)
		require.Equal(t, http.StatusAccepted, status)
		status, b := a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-a", nil))
		require.Equal(t, http.StatusConflict, status, "same name while Deleting")
		errorBody(t, 409, b)
		status, b = a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-b", map[string]any{"requestedNamespace": "team-a"}))
		require.Equal(t, http.StatusConflict, status, "same namespace while Deleting")
		errorBody(t, 409, b)

		s.Advance(30 * time.Second)
		status, _ = a.createProject(projectReq(s, "team-a", nil))
		assert.Equal(t, http.StatusCreated, status, "free again once gone")
	})
}

func TestDeleteProject(t *testing.T) {
	t.Run("with delay: 202, Deleting, then 404", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{DeleteDelay: 5 * time.Second})
		a := newAPI(t, s)
		_, p := a.createProject(projectReq(s, "team-a", nil))
		id := p["id"].(string)
		status, b := a.do(http.MethodDelete, "/api/v1/org-unit/projects/"+id, nil)
		require.Equal(t, http.StatusAccepted, status)
		assert.Empty(t, b)
		got := a.getJSON("/api/v1/org-unit/projects/" + id)
		assert.Equal(t, "Deleting", got["status"].(map[string]any)["phase"])
		status, _ = a.do(http.MethodDelete, "/api/v1/org-unit/projects/"+id, nil)
		assert.Equal(t, http.StatusAccepted, status, "deleting again is accepted again")

		s.Advance(5 * time.Second)
		status, b = a.do(http.MethodGet, "/api/v1/org-unit/projects/"+id, nil)
		require.Equal(t, http.StatusNotFound, status)
		errorBody(t, 404, b)
	})
	t.Run("with delay: gone after real time too", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{DeleteDelay: 100 * time.Millisecond})
		a := newAPI(t, s)
		_, p := a.createProject(projectReq(s, "team-a", nil))
		status, _ := a.do(http.MethodDelete, "/api/v1/org-unit/projects/"+p["id"].(string), nil)
		require.Equal(t, http.StatusAccepted, status)
		require.Eventually(t, func() bool {
			status, _ := a.do(http.MethodGet, "/api/v1/org-unit/projects/"+p["id"].(string), nil)
			return status == http.StatusNotFound
		}, 5*time.Second, 20*time.Millisecond)
	})
	t.Run("without delay: 204 and gone", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{})
		a := newAPI(t, s)
		_, p := a.createProject(projectReq(s, "team-a", nil))
		status, _ := a.do(http.MethodDelete, "/api/v1/org-unit/projects/"+p["id"].(string), nil)
		require.Equal(t, http.StatusNoContent, status)
		status, _ = a.do(http.MethodGet, "/api/v1/org-unit/projects/"+p["id"].(string), nil)
		assert.Equal(t, http.StatusNotFound, status)
	})
	t.Run("unknown: 404", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{})
		a := newAPI(t, s)
		status, b := a.do(http.MethodDelete, "/api/v1/org-unit/projects/424242", nil)
		require.Equal(t, http.StatusNotFound, status)
		errorBody(t, 404, b)
	})
}

func TestListPagingAndFilters(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{MaxPageSize: 2, Departments: []runaitest.DepartmentSeed{{Name: "research"}, {Name: "ops"}}})
	a := newAPI(t, s)
	research, _ := s.DepartmentByName("research")
	for i := 1; i <= 5; i++ {
		extra := map[string]any{}
		if i%2 == 0 {
			extra["parentId"] = research.ID
		}
		status, _ := a.createProject(projectReq(s, fmt.Sprintf("p%d", i), extra))
		require.Equal(t, http.StatusCreated, status)
	}
	cluster := s.Cluster().UUID

	t.Run("next pages through, absent on the last page", func(t *testing.T) {
		var all []string
		offset, pages := 0, 0
		for {
			m := a.getJSON(fmt.Sprintf("/api/v1/org-unit/projects?filterBy=clusterId==%s&limit=500&offset=%d", cluster, offset))
			pages++
			all = append(all, names(m["projects"].([]any))...)
			next, ok := m["next"]
			if !ok {
				break
			}
			offset = int(next.(float64))
		}
		assert.Equal(t, []string{"p1", "p2", "p3", "p4", "p5"}, all)
		assert.Equal(t, 3, pages, "the page size cap of 2 forces three pages")
	})
	t.Run("default limit and offset past the end", func(t *testing.T) {
		m := a.getJSON("/api/v1/org-unit/projects?offset=10")
		assert.Empty(t, m["projects"])
		assert.NotContains(t, m, "next")
	})
	t.Run("filters: repeated, comma-separated, operators", func(t *testing.T) {
		q := func(query string) []string {
			return names(a.getJSON("/api/v1/org-unit/projects?" + query)["projects"].([]any))
		}
		assert.Equal(t, []string{"p3"}, q("filterBy=clusterId=="+cluster+"&filterBy=name==p3"))
		assert.Equal(t, []string{"p3"}, q("filterBy="+url.QueryEscape("clusterId=="+cluster+",name==p3")))
		assert.Equal(t, []string{"p2", "p4"}, q("filterBy=parentId=="+research.ID))
		assert.Equal(t, []string{"p2", "p4"}, q("filterBy=departmentId=="+research.ID))
		assert.Equal(t, []string{"p2", "p4"}, q("filterBy=parentName==research"))
		assert.Equal(t, []string{"p1", "p3"}, q("filterBy="+url.QueryEscape("parentName!=research")+"&limit=2"))
		assert.Empty(t, q("filterBy=name==nope"))
		assert.Equal(t, []string{"p5", "p4"}, q("sortBy=name&sortOrder=desc&limit=2"))
	})
	t.Run("bad paging and filters are 400", func(t *testing.T) {
		for _, query := range []string{"limit=0", "limit=501", "offset=-1", "filterBy=color==red", "filterBy=name", "sortOrder=up"} {
			status, b := a.do(http.MethodGet, "/api/v1/org-unit/projects?"+query, nil)
			assert.Equal(t, http.StatusBadRequest, status, query)
			errorBody(t, 400, b)
		}
	})
	t.Run("departments: filters, verbosity, paging", func(t *testing.T) {
		m := a.getJSON("/api/v1/org-unit/departments?filterBy=clusterId==" + cluster + "&filterBy=name==research&verbosity=verbose")
		deps := m["departments"].([]any)
		require.Len(t, deps, 1)
		d := deps[0].(map[string]any)
		assert.Equal(t, research.ID, d["id"])
		assert.Contains(t, d, "status")
		assert.Contains(t, d["status"].(map[string]any), "quotaStatus")
		for _, f := range []string{"id", "name", "clusterId", "createdAt", "updatedAt", "totalResources", "resources", "description"} {
			assert.Contains(t, d, f)
		}
		m = a.getJSON("/api/v1/org-unit/departments?filterBy=name==research")
		assert.NotContains(t, m["departments"].([]any)[0], "status", "brief (default) has no status")
		m = a.getJSON("/api/v1/org-unit/departments")
		assert.Equal(t, []string{"default", "research"}, names(m["departments"].([]any)))
		assert.Equal(t, 2.0, m["next"])
		m = a.getJSON("/api/v1/org-unit/departments?offset=2")
		assert.Equal(t, []string{"ops"}, names(m["departments"].([]any)))
		assert.NotContains(t, m, "next")
	})
	t.Run("department by id", func(t *testing.T) {
		d := a.getJSON("/api/v1/org-unit/departments/" + research.ID)
		st := d["status"].(map[string]any)
		assert.Contains(t, st, "quotaStatus")
		assert.Len(t, st["nodePoolQuotaStatuses"], 1)
		assert.Len(t, d["children"], 2)
		agg := d["projectsAggregatedResources"].([]any)[0].(map[string]any)
		assert.Equal(t, 4.0, agg["gpu"].(map[string]any)["deserved"], "two projects x 2 GPUs")
		status, b := a.do(http.MethodGet, "/api/v1/org-unit/departments/999999", nil)
		require.Equal(t, http.StatusNotFound, status)
		errorBody(t, 404, b)
	})
}

func TestQuotaStatusAndTelemetry(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{
		NodePools:   []runaitest.NodePoolSeed{{Name: "default", TotalGPUs: 16}, {Name: "a100", TotalGPUs: 8}},
		Departments: []runaitest.DepartmentSeed{{Name: "research", DeservedGPUs: 10}},
		Projects: []runaitest.ProjectSeed{
			{Name: "a", Department: "research", DeservedGPUs: 4},
			{Name: "b", Department: "research", DeservedGPUs: 4},
		},
	})
	a := newAPI(t, s)
	require.NoError(t, s.SetAllocation("a", 3, 1))
	require.NoError(t, s.SetAllocation("b", 2, 2))
	require.Error(t, s.SetAllocation("nope", 1, 0))
	require.Error(t, s.SetAllocation("a", 1, 2), "non-preemptible cannot exceed allocated")

	pa, _ := s.ProjectByName("a")
	got := a.getJSON("/api/v1/org-unit/projects/" + pa.ID)
	qs := got["status"].(map[string]any)["quotaStatus"].(map[string]any)
	assert.Equal(t, 3.0, qs["allocated"].(map[string]any)["gpu"])
	assert.Equal(t, 1.0, qs["allocatedNonPreemptible"].(map[string]any)["gpu"])
	nps := got["status"].(map[string]any)["nodePoolQuotaStatuses"].([]any)
	require.Len(t, nps, 1)
	assert.Equal(t, "default", nps[0].(map[string]any)["nodePoolName"])

	research, _ := s.DepartmentByName("research")
	assert.Equal(t, 5.0, research.Status.QuotaStatus.Allocated.GPU)
	assert.Equal(t, 3.0, research.Status.QuotaStatus.AllocatedNonPreemptible.GPU)
	assert.Equal(t, 10.0, *research.TotalResources.GPUQuota)

	tele := func(query string) map[string]any {
		return a.getJSON("/api/v1/nodes/telemetry?clusterId=" + s.Cluster().UUID + "&" + query)
	}
	m := tele("telemetryType=FREE_GPUS&nodepoolName=default&groupBy=Nodepool")
	vals := m["values"].([]any)
	require.Len(t, vals, 1)
	v := vals[0].(map[string]any)
	assert.Equal(t, "11", v["value"], "16 total - 5 allocated; values are strings")
	assert.Equal(t, "Nodepool", v["groups"].([]any)[0].(map[string]any)["key"])
	assert.Equal(t, "default", v["groups"].([]any)[0].(map[string]any)["value"])
	assert.Equal(t, "FREE_GPUS", m["type"])

	require.NoError(t, s.SetFreeGPUs("default", 1.5))
	assert.Equal(t, "1.5", tele("telemetryType=FREE_GPUS&nodepoolName=default&groupBy=Nodepool")["values"].([]any)[0].(map[string]any)["value"])
	assert.Len(t, tele("telemetryType=TOTAL_GPUS&groupBy=Nodepool")["values"], 2, "one value per pool")
	assert.Equal(t, "24", tele("telemetryType=TOTAL_GPUS")["values"].([]any)[0].(map[string]any)["value"], "no groupBy: one sum")
	assert.Equal(t, "14.5", tele("telemetryType=ALLOCATED_GPUS&nodepoolName=default")["values"].([]any)[0].(map[string]any)["value"])
	assert.Empty(t, tele("telemetryType=FREE_GPUS&nodepoolName=nope&groupBy=Nodepool")["values"])
	require.NoError(t, s.SetFreeGPUs("default", -1))
	assert.Equal(t, "11", tele("telemetryType=FREE_GPUS&nodepoolName=default")["values"].([]any)[0].(map[string]any)["value"], "unpinned")

	for _, q := range []string{"", "telemetryType=COLOUR", "telemetryType=FREE_GPUS&groupBy=Node", "telemetryType=FREE_GPUS&groupBy=ClusterId,Nodepool,Node"} {
		status, b := a.do(http.MethodGet, "/api/v1/nodes/telemetry?"+q, nil)
		assert.Equal(t, http.StatusBadRequest, status, q)
		errorBody(t, 400, b)
	}
	status, _ := a.do(http.MethodGet, "/api/v1/nodes/telemetry?telemetryType=FREE_GPUS&clusterId=00000000-0000-4000-8000-000000000000", nil)
	assert.Equal(t, http.StatusNotFound, status)
}

func TestFaults(t *testing.T) {
	t.Run("status with times and Retry-After", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{})
		a := newAPI(t, s)
		s.AddFault(runaitest.Fault{Method: "GET", PathPrefix: "/api/v1/org-unit/projects", Status: 503, Times: 2, RetryAfter: 1500 * time.Millisecond})
		for i := 0; i < 2; i++ {
			req, _ := http.NewRequest(http.MethodGet, s.URL()+"/api/v1/org-unit/projects", nil)
			req.Header.Set("Authorization", "Bearer "+a.token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, "2", resp.Header.Get("Retry-After"), "rounded up to whole seconds")
		}
		status, _ := a.do(http.MethodGet, "/api/v1/org-unit/projects", nil)
		assert.Equal(t, http.StatusOK, status, "the fault fired its two times")
		status, _ = a.do(http.MethodGet, "/api/v1/clusters", nil)
		assert.Equal(t, http.StatusOK, status, "other paths unaffected")
		assert.Empty(t, s.Faults())
	})
	t.Run("body contains: fail creation in one department only", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}}})
		a := newAPI(t, s)
		research, _ := s.DepartmentByName("research")
		s.AddFault(runaitest.Fault{Method: "POST", PathPrefix: "/api/v1/org-unit/projects", Status: 500, BodyContains: `"parentId":"` + research.ID + `"`})
		status, _ := a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "in-research", map[string]any{"parentId": research.ID}))
		assert.Equal(t, http.StatusInternalServerError, status)
		status, _ = a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "in-default", nil))
		assert.Equal(t, http.StatusCreated, status)
		_, exists := s.ProjectByName("in-research")
		assert.False(t, exists, "a plain fault does not perform the operation")
	})
	t.Run("drop response: created, but the client sees 500 and then 409", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{})
		a := newAPI(t, s)
		s.AddFault(runaitest.Fault{Method: "POST", PathPrefix: "/api/v1/org-unit/projects", Status: 500, DropResponse: true, Times: 1})
		status, _ := a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-a", nil))
		assert.Equal(t, http.StatusInternalServerError, status)
		_, exists := s.ProjectByName("team-a")
		assert.True(t, exists, "the operation happened")
		status, _ = a.do(http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-a", nil))
		assert.Equal(t, http.StatusConflict, status, "a blind retry conflicts")
	})
	t.Run("drop response without status cuts the connection", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{})
		a := newAPI(t, s)
		s.AddFault(runaitest.Fault{Method: "POST", PathPrefix: "/api/v1/org-unit/projects", DropResponse: true})
		_, _, err := a.try(context.Background(), http.MethodPost, "/api/v1/org-unit/projects", projectReq(s, "team-a", nil))
		require.Error(t, err, "no HTTP answer at all")
		_, exists := s.ProjectByName("team-a")
		assert.True(t, exists)
		calls := s.Calls()
		assert.Equal(t, 0, calls[len(calls)-1].Status, "recorded as unanswered")
		assert.True(t, calls[len(calls)-1].Fault)
	})
	t.Run("rate is deterministic and roughly honoured", func(t *testing.T) {
		count := func() int {
			s := runaitest.Run(t, runaitest.Seed{})
			a := newAPI(t, s)
			s.AddFault(runaitest.Fault{PathPrefix: "/api/v1/clusters", Status: 429, Rate: 0.3})
			n := 0
			for i := 0; i < 200; i++ {
				if status, _ := a.do(http.MethodGet, "/api/v1/clusters", nil); status == http.StatusTooManyRequests {
					n++
				}
			}
			return n
		}
		n1, n2 := count(), count()
		assert.Equal(t, n1, n2, "same sequence, same faults")
		assert.InDelta(t, 60, n1, 25)
	})
	t.Run("token endpoint faults and ClearFaults", func(t *testing.T) {
		s := runaitest.Run(t, runaitest.Seed{})
		s.AddFault(runaitest.Fault{PathPrefix: "/api/v2/token", Status: 503})
		resp, err := http.PostForm(s.URL()+"/api/v2/token", url.Values{"grant_type": {"client_credentials"}})
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		s.ClearFaults()
		newAPI(t, s) // logs in fine
	})
}

func TestLatencyHonoursRequestContext(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{})
	a := newAPI(t, s)
	s.SetLatency(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := a.try(ctx, http.MethodGet, "/api/v1/clusters", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)

	s.SetLatency(50 * time.Millisecond)
	start = time.Now()
	status, _ := a.do(http.MethodGet, "/api/v1/clusters", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
}

func TestDownRefusesConnectionsAndComesBackOnTheSamePort(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{})
	a := newAPI(t, s)
	url1 := s.URL()

	require.NoError(t, s.SetDown(true))
	_, _, err := a.try(context.Background(), http.MethodGet, "/api/v1/clusters", nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "connection refused, got %v", err)

	require.NoError(t, s.SetDown(false))
	assert.Equal(t, url1, s.URL(), "same address")
	status, _ := a.do(http.MethodGet, "/api/v1/clusters", nil)
	assert.Equal(t, http.StatusOK, status, "tokens survive an outage")

	require.NoError(t, s.DownFor(200*time.Millisecond))
	_, _, err = a.try(context.Background(), http.MethodGet, "/api/v1/clusters", nil)
	require.Error(t, err)
	require.Eventually(t, func() bool {
		status, _, err := a.try(context.Background(), http.MethodGet, "/api/v1/clusters", nil)
		return err == nil && status == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond)
}

func TestDownInComposedHandlerCutsConnections(t *testing.T) {
	s := runaitest.New(runaitest.Seed{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	require.NoError(t, s.SetDown(true))
	resp, err := http.Get(ts.URL + "/api/v1/clusters")
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err)
	require.NoError(t, s.SetDown(false))
	resp, err = http.Get(ts.URL + "/api/v1/clusters")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestCallRecording(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{})
	a := newAPI(t, s)
	a.do(http.MethodGet, "/api/v1/org-unit/projects?filterBy=name==x", nil)
	_, p := a.createProject(projectReq(s, "team-a", nil))
	a.do(http.MethodDelete, "/api/v1/org-unit/projects/"+p["id"].(string), nil)
	a.do(http.MethodGet, "/_sim/state", nil) // admin calls are not recorded

	calls := s.Calls()
	require.Len(t, calls, 4)
	assert.Equal(t, "/api/v2/token", calls[0].Path)
	assert.Equal(t, "filterBy=name==x", calls[1].RawQuery)
	assert.Equal(t, http.StatusCreated, calls[2].Status)
	assert.Equal(t, http.StatusNoContent, calls[3].Status)
	assert.False(t, calls[3].Time.IsZero())
	assert.Equal(t, 3, s.CountCalls("", "/api/v1/org-unit/projects"), "list, create, delete")
	assert.Equal(t, 1, s.CountCalls(http.MethodPost, "/api/v1/org-unit/projects"))
	assert.Equal(t, 2, s.CountWrites(), "POST and DELETE; the token POST does not count")
	s.ResetCalls()
	assert.Empty(t, s.Calls())
	assert.Zero(t, s.CountWrites())
}

func TestHelpersMoveRenameDeleteNow(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{Departments: []runaitest.DepartmentSeed{{Name: "research"}},
		Projects: []runaitest.ProjectSeed{{Name: "p", Department: "research"}}})
	a := newAPI(t, s)

	ops := s.AddDepartment("ops")
	assert.Equal(t, ops.ID, s.AddDepartment("ops").ID, "idempotent")
	require.NoError(t, s.MoveProject("p", "ops"))
	p, _ := s.ProjectByName("p")
	assert.Equal(t, ops.ID, p.ParentID)
	got := a.getJSON("/api/v1/org-unit/projects/" + p.ID)
	assert.Equal(t, "ops", got["parent"].(map[string]any)["name"])

	require.NoError(t, s.RenameDepartment("ops", "operations"))
	got = a.getJSON("/api/v1/org-unit/projects/" + p.ID)
	assert.Equal(t, "operations", got["parent"].(map[string]any)["name"])
	assert.Equal(t, ops.ID, got["parentId"], "same id")
	assert.Error(t, s.RenameDepartment("operations", "research"), "name taken")
	assert.Error(t, s.MoveProject("p", "nope"))

	adopted := s.AddProject(runaitest.ProjectSeed{Name: "adopt-me", Namespace: "hops-ns", DeservedGPUs: 1})
	assert.Equal(t, "hops-ns", adopted.BoundNamespace())
	assert.Equal(t, runai.PhaseReady, adopted.Status.Phase)

	require.NoError(t, s.SetProjectPhase("adopt-me", runai.PhaseNotReady))
	adopted, _ = s.ProjectByName("adopt-me")
	assert.Equal(t, runai.PhaseNotReady, adopted.Status.Phase)

	assert.True(t, s.DeleteProjectNow("adopt-me"))
	assert.False(t, s.DeleteProjectNow("adopt-me"))
	status, _ := a.do(http.MethodGet, "/api/v1/org-unit/projects/"+adopted.ID, nil)
	assert.Equal(t, http.StatusNotFound, status)
}

func TestConcurrentCreatesGetUniqueIDs(t *testing.T) {
	s := runaitest.Run(t, runaitest.Seed{})
	a := newAPI(t, s)
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every second request reuses a name: exactly one of each pair wins.
			name := fmt.Sprintf("p%d", i/2)
			status, _, err := a.try(context.Background(), http.MethodPost, "/api/v1/org-unit/projects",
				projectReq(s, name, map[string]any{"requestedNamespace": nil}))
			if err == nil {
				statuses[i] = status
			}
		}()
	}
	wg.Wait()
	created, conflicts := 0, 0
	for _, st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
			conflicts++
		}
	}
	assert.Equal(t, 10, created)
	assert.Equal(t, 10, conflicts)
	ids := map[string]bool{}
	for _, p := range s.Projects() {
		ids[p.ID] = true
	}
	assert.Len(t, ids, 10)
}
