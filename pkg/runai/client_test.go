package runai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Test fixtures: a tiny Run:ai stand-in built from handlers in this file.

const (
	testClientID  = "client-under-test"
	testSecret    = "sUp3r$ecret+/=&vAlue-7f3a9" // distinctive, and changes under form/JSON encoding
	testClusterID = "71f69d83-ba66-4822-adf5-55ce55efd210"
)

// fake serves the token endpoints and hands every other path to api.
// Counters are per endpoint. Tokens are "tok-<n>".
type fake struct {
	t         *testing.T
	srv       *httptest.Server
	v2, v1    http.HandlerFunc // nil v2 = standard OAuth2 answer; nil v1 = 404
	api       http.HandlerFunc
	expiresIn atomic.Int64 // seconds, for the default v2 and v1 answers
	issued    atomic.Int32
	v2Reqs    atomic.Int32
	v1Reqs    atomic.Int32
	apiReqs   atomic.Int32
	logs      *logCapture
}

func newFake(t *testing.T, api http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{t: t, api: api, logs: &logCapture{}}
	f.expiresIn.Store(3600)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case TokenPathV2:
		f.v2Reqs.Add(1)
		if f.v2 != nil {
			f.v2(w, r)
			return
		}
		f.defaultV2(w, r)
	case TokenPathV1:
		f.v1Reqs.Add(1)
		if f.v1 != nil {
			f.v1(w, r)
			return
		}
		writeJSON(w, http.StatusNotFound, APIError{Code: 404, Message: "Not Found"})
	default:
		f.apiReqs.Add(1)
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-") {
			writeJSON(w, http.StatusUnauthorized, APIError{Code: 401, Message: "Issuer is not familiar."})
			return
		}
		f.api(w, r)
	}
}

func (f *fake) defaultV2(w http.ResponseWriter, r *http.Request) {
	assert.Equal(f.t, http.MethodPost, r.Method)
	assert.Equal(f.t, "application/x-www-form-urlencoded", r.Header.Get("Content-Type"))
	assert.NoError(f.t, r.ParseForm())
	assert.Equal(f.t, "client_credentials", r.PostForm.Get("grant_type"))
	assert.Equal(f.t, testClientID, r.PostForm.Get("client_id"))
	assert.Equal(f.t, testSecret, r.PostForm.Get("client_secret"))
	assert.False(f.t, r.PostForm.Has("scope"), "no scope is sent")
	assert.Empty(f.t, r.Header.Get("Authorization"), "credentials go in the form, not Basic auth")
	writeJSON(w, http.StatusOK, TokenResponseV2{
		AccessToken: f.nextToken(), TokenType: "Bearer", ExpiresIn: f.expiresIn.Load(),
	})
}

func (f *fake) nextToken() string { return fmt.Sprintf("tok-%d", f.issued.Add(1)) }

// client builds a client against the fake with fast retries and a captured logger.
func (f *fake) client(mutate ...func(*ClientConfig)) *Client {
	f.t.Helper()
	cfg := ClientConfig{
		BaseURL:      f.srv.URL,
		ClientID:     testClientID,
		ClientSecret: testSecret,
		Logger:       f.logs.logger(),
		Retry:        RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
		PollInterval: 5 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(f.t, err)
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// vendorError answers the vendor Error body with status.
func vendorError(status int, msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, status, APIError{Code: status, Message: msg})
	}
}

type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCapture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (l *logCapture) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

type countingObserver struct {
	mu     sync.Mutex
	calls  []string // "op status"
	tokens []string // "endpoint ok|err"
}

func (o *countingObserver) ObserveCall(op string, status int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s %d", op, status))
}

func (o *countingObserver) ObserveTokenRefresh(endpoint string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	res := "ok"
	if err != nil {
		res = "err"
	}
	o.tokens = append(o.tokens, endpoint+" "+res)
}

func project(id, name string) Project {
	ns := name
	return Project{ID: id, Name: name, ClusterID: testClusterID, ParentID: "1", RequestedNamespace: &ns,
		Status: ProjectStatus{Phase: PhaseReady, Namespace: &ns}, Resources: []Resources{}}
}

// ---------------------------------------------------------------------------
// Construction

func TestNewClientValidation(t *testing.T) {
	ok := ClientConfig{BaseURL: "http://127.0.0.1:8080", ClientID: "id", ClientSecret: "s"}
	tests := []struct {
		name    string
		mutate  func(*ClientConfig)
		wantErr string
	}{
		{"valid http", func(*ClientConfig) {}, ""},
		{"valid https with path prefix", func(c *ClientConfig) { c.BaseURL = "https://tenant.run.ai/prefix/" }, ""},
		{"empty url", func(c *ClientConfig) { c.BaseURL = "" }, "BaseURL is empty"},
		{"relative url", func(c *ClientConfig) { c.BaseURL = "/api" }, "absolute http or https"},
		{"ftp scheme", func(c *ClientConfig) { c.BaseURL = "ftp://host" }, "absolute http or https"},
		{"no host", func(c *ClientConfig) { c.BaseURL = "http://" }, "no host"},
		{"unparsable", func(c *ClientConfig) { c.BaseURL = "http://[::1" }, "not a valid URL"},
		{"credentials in url", func(c *ClientConfig) { c.BaseURL = "http://u:p@host" }, "credentials"},
		{"query", func(c *ClientConfig) { c.BaseURL = "http://host/?a=b" }, "query"},
		{"empty client id", func(c *ClientConfig) { c.ClientID = " " }, "ClientID is empty"},
		{"empty secret", func(c *ClientConfig) { c.ClientSecret = "" }, "ClientSecret is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mutate(&cfg)
			c, err := NewClient(cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.NotNil(t, c)
				assert.False(t, strings.HasSuffix(c.base, "/"))
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestNewClientDefaults(t *testing.T) {
	c, err := NewClient(ClientConfig{BaseURL: "http://h", ClientID: "id", ClientSecret: "s"})
	require.NoError(t, err)
	assert.Equal(t, DefaultPollInterval, c.poll)
	assert.Equal(t, RetryPolicy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second, MaxRetryAfter: DefaultMaxRetryAfter}, c.retry)
	require.NotNil(t, c.hc)
	tr, ok := c.hc.Transport.(*http.Transport)
	require.True(t, ok)
	assert.Equal(t, 5*time.Second, tr.TLSHandshakeTimeout)
	assert.Positive(t, tr.MaxIdleConnsPerHost)
}

// ---------------------------------------------------------------------------
// Clusters and node pools

func TestClusterSelection(t *testing.T) {
	a := Cluster{UUID: "uuid-a", Name: "prod", TenantID: 1}
	b := Cluster{UUID: "uuid-b", Name: "dev", TenantID: 1}
	dup := Cluster{UUID: "uuid-c", Name: "prod", TenantID: 1}
	tests := []struct {
		name     string
		clusters []Cluster
		want     string // UUID
		wantKind Kind
		wantMsg  string
	}{
		{"only one, no name", []Cluster{a}, "uuid-a", 0, ""},
		{"by name among several", []Cluster{a, b}, "uuid-b", 0, ""},
		{"by uuid", []Cluster{a, b}, "uuid-a", 0, ""},
		{"ambiguous without name", []Cluster{a, b}, "", KindInvalid, "2 clusters"},
		{"none", nil, "", KindNotFound, "no cluster"},
		{"name not found", []Cluster{a, b}, "", KindNotFound, `no cluster named "staging"`},
		{"name held twice", []Cluster{a, dup}, "", KindInvalid, "named \"prod\""},
	}
	names := map[string]string{
		"by name among several": "dev", "by uuid": "uuid-a", "name not found": "staging", "name held twice": "prod",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				assert.Equal(t, pathClusters, r.URL.Path)
				list := tt.clusters
				if list == nil {
					list = []Cluster{}
				}
				writeJSON(w, http.StatusOK, list) // a bare array
			})
			c := f.client(func(cfg *ClientConfig) { cfg.ClusterName = names[tt.name] })
			got, err := c.Cluster(context.Background())
			if tt.wantKind != 0 {
				require.Error(t, err)
				assert.Equal(t, tt.wantKind, KindOf(err), err.Error())
				assert.Contains(t, err.Error(), tt.wantMsg)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.UUID)
			// Cached: a second call does not ask again.
			again, err := c.Cluster(context.Background())
			require.NoError(t, err)
			assert.Equal(t, got, again)
			assert.Equal(t, int32(1), hits.Load())
		})
	}
}

func TestDefaultNodePool(t *testing.T) {
	tests := []struct {
		name    string
		pools   []NodePool
		want    string
		wantErr bool
	}{
		{"isDefault wins", []NodePool{{ID: "1", Name: "default"}, {ID: "2", Name: "a100", IsDefault: true}}, "2", false},
		{"fallback to name default", []NodePool{{ID: "1", Name: "a100"}, {ID: "3", Name: "default"}}, "3", false},
		{"neither", []NodePool{{ID: "1", Name: "a100"}}, "", true},
		{"other cluster ignored", []NodePool{{ID: "9", Name: "default", IsDefault: true, ClusterID: "other"}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				assert.Equal(t, pathNodePools, r.URL.Path)
				assert.Equal(t, []string{"clusterId==" + testClusterID}, r.URL.Query()["filterBy"])
				writeJSON(w, http.StatusOK, NodePoolList{NodePools: tt.pools})
			})
			np, err := f.client().DefaultNodePool(context.Background(), testClusterID)
			if tt.wantErr {
				assert.True(t, IsNotFound(err), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, np.ID)
		})
	}
}

// ---------------------------------------------------------------------------
// Paging

// pagedProjects serves total projects with limit/offset/next paging and
// records the offsets asked for.
func pagedProjects(t *testing.T, total int, offsets *[]int, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, pathProjects, r.URL.Path)
		q := r.URL.Query()
		assert.True(t, strings.HasPrefix(q.Get("filterBy"), "clusterId=="+testClusterID))
		limit, err := strconv.Atoi(q.Get("limit"))
		assert.NoError(t, err)
		offset, _ := strconv.Atoi(q.Get("offset"))
		mu.Lock()
		*offsets = append(*offsets, offset)
		mu.Unlock()
		end := min(offset+limit, total)
		page := ProjectList{Projects: []Project{}}
		for i := offset; i < end; i++ {
			page.Projects = append(page.Projects, project(strconv.Itoa(i), fmt.Sprintf("p-%04d", i)))
		}
		if end < total {
			page.Next = &end
		}
		writeJSON(w, http.StatusOK, page)
	}
}

func TestPagingProjects1200(t *testing.T) {
	var offsets []int
	var mu sync.Mutex
	f := newFake(t, pagedProjects(t, 1200, &offsets, &mu))
	got, err := f.client().ListProjects(context.Background(), testClusterID, "")
	require.NoError(t, err)
	require.Len(t, got, 1200)
	seen := map[string]bool{}
	for _, p := range got {
		seen[p.ID] = true
	}
	assert.Len(t, seen, 1200, "all projects unique")
	assert.Equal(t, []int{0, 500, 1000}, offsets, "3 pages of limit 500")
	assert.Equal(t, int32(3), f.apiReqs.Load())
	assert.Equal(t, int32(1), f.v2Reqs.Load(), "one token for all pages")
}

func TestPagingDepartmentsFiltersAndVerbosity(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, pathDepartments, r.URL.Path)
		q := r.URL.Query()
		assert.Equal(t, []string{"clusterId==" + testClusterID + ",name==research"}, q["filterBy"], "filters comma-separated in one filterBy (explode:false)")
		assert.Equal(t, "verbose", q.Get("verbosity"))
		assert.Equal(t, "500", q.Get("limit"))
		assert.Equal(t, "0", q.Get("offset"))
		writeJSON(w, http.StatusOK, DepartmentList{Departments: []Department{
			{ID: "7", Name: "research", ClusterID: testClusterID},
			{ID: "8", Name: "other", ClusterID: testClusterID}, // a server that ignored the name filter
		}})
	})
	got, err := f.client().ListDepartments(context.Background(), testClusterID, "research")
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "7", got[0].ID)
}

func TestPagingProjectsNameFilter(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, []string{"clusterId==" + testClusterID + ",name==team-a"}, r.URL.Query()["filterBy"])
		assert.Empty(t, r.URL.Query().Get("verbosity"))
		writeJSON(w, http.StatusOK, ProjectList{Projects: []Project{project("1", "team-a")}})
	})
	got, err := f.client().ListProjects(context.Background(), testClusterID, "team-a")
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "team-a", got[0].BoundNamespace())
}

func TestPagingNeverEndingServer(t *testing.T) {
	t.Run("next keeps advancing", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
			next := off + 1
			writeJSON(w, http.StatusOK, ProjectList{Projects: []Project{project(strconv.Itoa(off), "p")}, Next: &next})
		})
		c := f.client()
		c.maxPages = 5
		_, err := c.ListProjects(context.Background(), testClusterID, "")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "gave up after 5 pages")
		assert.Equal(t, int32(5), f.apiReqs.Load())
	})
	t.Run("next does not advance", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			zero := 0
			writeJSON(w, http.StatusOK, DepartmentList{Departments: []Department{{ID: "1"}}, Next: &zero})
		})
		_, err := f.client().ListDepartments(context.Background(), testClusterID, "")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "refusing to loop")
		assert.Equal(t, int32(1), f.apiReqs.Load())
	})
	t.Run("null next ends", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"projects":[{"id":"1","name":"a","clusterId":"`+testClusterID+`"}],"next":null}`)
		})
		got, err := f.client().ListProjects(context.Background(), testClusterID, "")
		require.NoError(t, err)
		assert.Len(t, got, 1)
	})
}

func TestGetDepartmentAndProject(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case pathDepartments + "/50":
			writeJSON(w, http.StatusOK, Department{ID: "50", Name: "research"})
		case pathProjects + "/33":
			writeJSON(w, http.StatusOK, project("33", "team-a"))
		default:
			vendorError(http.StatusNotFound, "Resource id not found.")(w, r)
		}
	})
	c := f.client()
	d, err := c.GetDepartment(context.Background(), "50")
	require.NoError(t, err)
	assert.Equal(t, "research", d.Name)
	p, err := c.GetProject(context.Background(), "33")
	require.NoError(t, err)
	assert.Equal(t, "team-a", p.Name)
	_, err = c.GetProject(context.Background(), "34")
	assert.True(t, IsNotFound(err))
	assert.Contains(t, err.Error(), "Resource id not found.")
	_, err = c.GetProject(context.Background(), "")
	assert.True(t, IsInvalid(err), "an empty id never reaches the list endpoint")
}

// ---------------------------------------------------------------------------
// Create and delete

func TestCreateProjectSuccess(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, http.MethodPost, r.Method)
		assert.Equal(t, pathProjects, r.URL.Path)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		var body map[string]any
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		assert.Equal(t, "team-a", body["name"])
		assert.Equal(t, testClusterID, body["clusterId"])
		assert.Equal(t, "team-a", body["requestedNamespace"])
		assert.Equal(t, "9", body["parentId"])
		assert.Equal(t, []any{}, body["resources"], "resources is required, sent even when empty")
		writeJSON(w, http.StatusCreated, project("33", "team-a"))
	})
	parent := "9"
	p, err := f.client().CreateProject(context.Background(), ProjectCreationRequest{
		Name: "team-a", ClusterID: testClusterID, ParentID: &parent, RequestedNamespace: "team-a",
	})
	require.NoError(t, err)
	assert.Equal(t, "33", p.ID)
}

func TestCreateProjectConflictNotRetried(t *testing.T) {
	tests := []struct {
		name   string
		status int
		is     func(error) bool
	}{
		{"409 conflict", http.StatusConflict, IsConflict},
		{"503 not retried", http.StatusServiceUnavailable, IsUnavailable},
		{"500 not retried", http.StatusInternalServerError, IsUnavailable},
		{"429 not retried", http.StatusTooManyRequests, IsRateLimited},
		{"400 invalid", http.StatusBadRequest, IsInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var posts atomic.Int32
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					posts.Add(1)
				}
				vendorError(tt.status, "Resource with this name already exists")(w, r)
			})
			_, err := f.client().CreateProject(context.Background(), ProjectCreationRequest{Name: "a", ClusterID: testClusterID})
			require.Error(t, err)
			assert.True(t, tt.is(err), "%v", err)
			assert.Equal(t, int32(1), posts.Load(), "create is never retried")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "create project", e.Op)
			assert.Equal(t, tt.status, e.Status)
			assert.Equal(t, "Resource with this name already exists", e.Message)
		})
	}
}

func TestDeleteProject(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // answered in order, the last repeats
		wantErr  func(error) bool
		wantReqs int32
	}{
		{"202 accepted", []int{202}, nil, 1},
		{"204 deleted", []int{204}, nil, 1},
		{"404 already gone", []int{404}, nil, 1},
		{"503 then 204 retried", []int{503, 204}, nil, 2},
		{"500 always", []int{500}, IsUnavailable, 3},
		{"403 forbidden", []int{403}, IsForbidden, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				assert.Equal(t, http.MethodDelete, r.Method)
				assert.Equal(t, pathProjects+"/33", r.URL.Path)
				i := int(n.Add(1)) - 1
				st := tt.statuses[min(i, len(tt.statuses)-1)]
				if st == 204 {
					w.WriteHeader(st)
					return
				}
				writeJSON(w, st, APIError{Code: st, Message: http.StatusText(st)})
			})
			err := f.client().DeleteProject(context.Background(), "33")
			if tt.wantErr == nil {
				assert.NoError(t, err)
			} else {
				assert.True(t, tt.wantErr(err), "%v", err)
			}
			assert.Equal(t, tt.wantReqs, n.Load())
		})
	}
}

func TestWaitProjectGone(t *testing.T) {
	t.Run("gone after a few polls", func(t *testing.T) {
		var n atomic.Int32
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			switch n.Add(1) {
			case 1, 2:
				p := project("33", "a")
				p.Status.Phase = PhaseDeleting
				writeJSON(w, http.StatusOK, p)
			case 3:
				vendorError(http.StatusServiceUnavailable, "Please try again in few minutes.")(w, r)
			default:
				vendorError(http.StatusNotFound, "Resource id not found.")(w, r)
			}
		})
		c := f.client(func(cfg *ClientConfig) { cfg.Retry.MaxAttempts = 1 })
		require.NoError(t, c.WaitProjectGone(context.Background(), "33"))
		assert.Equal(t, int32(4), n.Load(), "a transient 503 keeps polling")
	})
	t.Run("context ends first", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			p := project("33", "a")
			p.Status.Phase = PhaseDeleting
			writeJSON(w, http.StatusOK, p)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer cancel()
		err := f.client().WaitProjectGone(ctx, "33")
		require.Error(t, err)
		assert.True(t, IsUnavailable(err))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "phase Deleting")
		assert.Greater(t, f.apiReqs.Load(), int32(2), "polled every PollInterval")
	})
	t.Run("forbidden stops", func(t *testing.T) {
		f := newFake(t, vendorError(http.StatusForbidden, "You do not have sufficient permissions."))
		err := f.client().WaitProjectGone(context.Background(), "33")
		assert.True(t, IsForbidden(err))
	})
}

// ---------------------------------------------------------------------------
// Telemetry

func TestFreeGPUs(t *testing.T) {
	group := func(v string) []TelemetryGroup { return []TelemetryGroup{{Key: "Nodepool", Value: v, Name: v}} }
	tests := []struct {
		name    string
		values  []TelemetryValue
		want    float64
		wantErr bool
	}{
		{"matching group", []TelemetryValue{{Value: "3", Groups: group("a100")}, {Value: "6.5", Groups: group("default")}}, 6.5, false},
		{"single value without group", []TelemetryValue{{Value: "4"}}, 4, false},
		{"zero", []TelemetryValue{{Value: "0", Groups: group("default")}}, 0, false},
		{"no match among several", []TelemetryValue{{Value: "3", Groups: group("a")}, {Value: "4", Groups: group("b")}}, 0, true},
		{"empty", nil, 0, true},
		{"not a number", []TelemetryValue{{Value: "lots", Groups: group("default")}}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				assert.Equal(t, pathNodesTelem, r.URL.Path)
				q := r.URL.Query()
				assert.Equal(t, "FREE_GPUS", q.Get("telemetryType"))
				assert.Equal(t, testClusterID, q.Get("clusterId"))
				assert.Equal(t, "default", q.Get("nodepoolName"))
				assert.Equal(t, "Nodepool", q.Get("groupBy"))
				writeJSON(w, http.StatusOK, TelemetryResponse{Type: "FREE_GPUS", Values: tt.values})
			})
			got, err := f.client().FreeGPUs(context.Background(), testClusterID, "default")
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.want, got, 1e-9)
		})
	}
}

// ---------------------------------------------------------------------------
// Errors and retries

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		status int
		body   string
		kind   Kind
		msg    string
	}{
		{400, `{"code":400,"message":"Required parameter is missing"}`, KindInvalid, "Required parameter is missing"},
		{422, `{"code":422,"message":"bad","details":"field x"}`, KindInvalid, "bad: field x"},
		{403, `{"code":403,"message":"You do not have sufficient permissions."}`, KindForbidden, "You do not have sufficient permissions."},
		{404, `{"code":404,"message":"Resource id not found."}`, KindNotFound, "Resource id not found."},
		{409, `{"code":409,"message":"Resource with this name already exists"}`, KindConflict, "Resource with this name already exists"},
		{429, ``, KindRateLimited, ""},
		{500, "<html>\n  oops\n</html>", KindUnavailable, "<html> oops </html>"},
		{502, `bad gateway`, KindUnavailable, "bad gateway"},
		{503, `{"code":503,"message":"Please try again in few minutes."}`, KindUnavailable, "Please try again in few minutes."},
		{418, `teapot`, KindUnknown, "teapot"},
		{500, strings.Repeat("x", 5000), KindUnavailable, strings.Repeat("x", maxMessage) + "…"},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			c := f.client(func(cfg *ClientConfig) { cfg.Retry.MaxAttempts = 1 })
			_, err := c.GetProject(context.Background(), "1")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.kind, e.Kind)
			assert.Equal(t, tt.status, e.Status)
			assert.Equal(t, "get project", e.Op)
			assert.Equal(t, tt.msg, e.Message)
		})
	}
}

func TestErrorBodyTooLarge(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"1","name":"`+strings.Repeat("a", 2<<20)+`"}`)
	})
	_, err := f.client().GetProject(context.Background(), "1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "larger than 1048576 bytes")
	assert.Equal(t, int32(1), f.apiReqs.Load(), "not retried")
}

func TestRetryUnavailableBackoff(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int
		wantErr  bool
		wantReqs int32
	}{
		{"503 twice then 200", []int{503, 502, 200}, false, 3},
		{"500 always gives up after 3", []int{500}, true, 3},
		{"404 not retried", []int{404}, true, 1},
		{"403 not retried", []int{403}, true, 1},
		{"400 not retried", []int{400}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1)) - 1
				st := tt.statuses[min(i, len(tt.statuses)-1)]
				if st == 200 {
					writeJSON(w, st, project("1", "a"))
					return
				}
				writeJSON(w, st, APIError{Code: st, Message: "x"})
			})
			c := f.client()
			var sleeps []time.Duration
			c.sleep = func(_ context.Context, d time.Duration) error { sleeps = append(sleeps, d); return nil }
			_, err := c.GetProject(context.Background(), "1")
			assert.Equal(t, tt.wantErr, err != nil, "%v", err)
			assert.Equal(t, tt.wantReqs, n.Load())
			assert.Len(t, sleeps, int(tt.wantReqs)-1)
			for _, d := range sleeps {
				assert.LessOrEqual(t, d, 5*time.Millisecond, "jittered backoff stays under the cap")
			}
		})
	}
}

func TestRetryBackoffBounds(t *testing.T) {
	p := RetryPolicy{}.withDefaults()
	for attempt := 1; attempt <= 10; attempt++ {
		ceiling := min(p.BaseDelay<<(attempt-1), p.MaxDelay)
		for range 50 {
			d := p.backoff(attempt)
			assert.GreaterOrEqual(t, d, time.Duration(0))
			assert.LessOrEqual(t, d, ceiling)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"1", time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, parseRetryAfter(tt.in, now))
		})
	}
}

// rateLimitedOnce answers 429 with retryAfter once, then a project.
func rateLimitedOnce(retryAfter string, n *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", retryAfter)
			writeJSON(w, http.StatusTooManyRequests, APIError{Code: 429, Message: "slow down"})
			return
		}
		writeJSON(w, http.StatusOK, project("1", "a"))
	}
}

func TestRateLimitRetryAfterHonoured(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter string
		want       time.Duration
	}{
		{"seconds", "1", time.Second},
		{"http date", time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat), 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			f := newFake(t, rateLimitedOnce(tt.retryAfter, &n))
			c := f.client()
			var sleeps []time.Duration
			c.sleep = func(_ context.Context, d time.Duration) error { sleeps = append(sleeps, d); return nil }
			_, err := c.GetProject(context.Background(), "1")
			require.NoError(t, err)
			assert.Equal(t, int32(2), n.Load())
			require.Len(t, sleeps, 1)
			// An HTTP date has one-second resolution.
			assert.InDelta(t, tt.want.Seconds(), sleeps[0].Seconds(), 1.0)
			assert.Greater(t, sleeps[0], tt.want-time.Second-time.Millisecond)
			if tt.name == "seconds" {
				assert.Equal(t, time.Second, sleeps[0])
			}
		})
	}
}

func TestRateLimitRetryAfterHonouredRealTime(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, rateLimitedOnce("1", &n))
	c := f.client()
	start := time.Now()
	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), time.Second)
	assert.Equal(t, int32(2), n.Load())
}

func TestRateLimitRetryAfterBeyondDeadlineReturnsPromptly(t *testing.T) {
	t.Run("beyond ctx deadline", func(t *testing.T) {
		var n atomic.Int32
		f := newFake(t, rateLimitedOnce("30", &n))
		c := f.client()
		// Warm the token so the timing below measures the call only.
		_, err := c.tokens.TokenContext(context.Background())
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err = c.GetProject(ctx, "1")
		elapsed := time.Since(start)
		require.Error(t, err)
		assert.True(t, IsRateLimited(err), "%v", err)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 30*time.Second, e.RetryAfter)
		assert.Less(t, elapsed, 500*time.Millisecond, "does not sleep towards a deadline it cannot meet")
		assert.Equal(t, int32(1), n.Load())
	})
	t.Run("beyond MaxRetryAfter without deadline", func(t *testing.T) {
		var n atomic.Int32
		f := newFake(t, rateLimitedOnce("3600", &n))
		c := f.client()
		c.sleep = func(context.Context, time.Duration) error { t.Error("must not sleep"); return nil }
		_, err := c.GetProject(context.Background(), "1")
		assert.True(t, IsRateLimited(err), "%v", err)
		assert.Equal(t, int32(1), n.Load())
	})
}

func TestContextDeadlineHangingServer(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	// Runs before the server's Close, which was registered earlier.
	defer close(release)
	// The default retry policy: retries must not outlive the deadline.
	c := f.client(func(cfg *ClientConfig) { cfg.Retry = RetryPolicy{} })
	_, err := c.tokens.TokenContext(context.Background())
	require.NoError(t, err)

	for _, call := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"get", func(ctx context.Context) error { _, err := c.GetProject(ctx, "1"); return err }},
		{"list", func(ctx context.Context) error { _, err := c.ListProjects(ctx, testClusterID, ""); return err }},
		{"create", func(ctx context.Context) error {
			_, err := c.CreateProject(ctx, ProjectCreationRequest{Name: "a", ClusterID: testClusterID})
			return err
		}},
		{"delete", func(ctx context.Context) error { return c.DeleteProject(ctx, "1") }},
	} {
		t.Run(call.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := call.run(ctx)
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.Less(t, elapsed, 150*time.Millisecond)
			assert.True(t, IsUnavailable(err), "%v", err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
}

func TestContextDeadlineDuringTokenFetch(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, project("1", "a")) })
	f.v2 = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.client().GetProject(ctx, "1")
	assert.Less(t, time.Since(start), 150*time.Millisecond)
	assert.True(t, IsUnavailable(err), "%v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "get project: fetch token")
}

func TestTransportErrorUnavailable(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {})
	c := f.client()
	f.srv.Close()
	_, err := c.GetProject(context.Background(), "1")
	assert.True(t, IsUnavailable(err), "%v", err)
	assert.Equal(t, 0, err.(*Error).Status)
}

func TestObserverAndLogging(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			vendorError(503, "busy")(w, r)
			return
		}
		writeJSON(w, 200, project("1", "a"))
	})
	obs := &countingObserver{}
	c := f.client(func(cfg *ClientConfig) { cfg.Observer = obs })
	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, []string{"get project 503", "get project 200"}, obs.calls)
	assert.Equal(t, []string{TokenPathV2 + " ok"}, obs.tokens)
	var callLines int
	for _, l := range f.logs.all() {
		if strings.Contains(l, `"msg"="run:ai call"`) {
			callLines++
			assert.Contains(t, l, `"op"="get project"`)
		}
	}
	assert.Equal(t, 2, callLines)
}

// TestNoSecretInErrorsOrLogs runs many failure modes with a distinctive
// secret and checks that no error string and no log line carries the
// secret (raw, form-encoded, JSON-escaped, or a long prefix of it) or a token.
func TestNoSecretInErrorsOrLogs(t *testing.T) {
	const leakedToken = "tok-LEAKCHECK-0123456789abcdef"
	echo := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "echo: url=%s auth=%s body=%s secret=%s", r.URL, r.Header.Get("Authorization"), b, testSecret)
	}
	issueLeakToken := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, TokenResponseV2{AccessToken: leakedToken, TokenType: "Bearer", ExpiresIn: 3600})
	}
	tests := []struct {
		name  string
		setup func(f *fake)
		call  func(c *Client) error
	}{
		{"401 on v2 token echoing the form", func(f *fake) {
			f.v2 = func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = fmt.Fprintf(w, "bad credentials in %s", b)
			}
		}, nil},
		{"400 invalid_client with the secret in the description", func(f *fake) {
			f.v2 = func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 400, map[string]string{"error": "invalid_client", "error_description": "secret " + testSecret + " is wrong"})
			}
		}, nil},
		{"500 on v2 token echoing everything", func(f *fake) { f.v2 = echo }, nil},
		{"200 token answer that is not JSON", func(f *fake) {
			f.v2 = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				_, _ = io.WriteString(w, "<html>"+testSecret+"</html>")
			}
		}, nil},
		{"v1 fallback echoing the JSON body", func(f *fake) {
			f.v2 = vendorError(404, "Not Found")
			f.v1 = echo
		}, nil},
		{"v1 answer without accessToken", func(f *fake) {
			f.v2 = vendorError(404, "Not Found")
			f.v1 = func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, map[string]string{"secret": testSecret})
			}
		}, nil},
		{"500 from the API echoing secret and token", func(f *fake) {
			f.v2 = issueLeakToken
			f.api = echo
		}, nil},
		{"secret straddling the truncation point", func(f *fake) {
			f.v2 = issueLeakToken
			f.api = func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(500)
				_, _ = io.WriteString(w, strings.Repeat("x", maxMessage-20)+testSecret+" "+leakedToken)
			}
		}, nil},
		{"401 twice echoing the bearer token", func(f *fake) {
			f.v2 = issueLeakToken
			f.api = func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 401, APIError{Code: 401, Message: "token " + r.Header.Get("Authorization") + " rejected"})
			}
		}, nil},
		{"token endpoint unreachable", func(f *fake) { f.srv.Close() }, nil},
		{"create answering 500 with the request echoed", func(f *fake) { f.v2 = issueLeakToken; f.api = echo },
			func(c *Client) error {
				_, err := c.CreateProject(context.Background(), ProjectCreationRequest{Name: testSecret, ClusterID: testClusterID})
				return err
			}},
	}
	forbidden := []string{testSecret, formEscape(testSecret), `sUp3r$ecret+\/`, testSecret[:12], leakedToken}
	check := func(t *testing.T, where, s string) {
		t.Helper()
		for _, bad := range forbidden {
			assert.NotContains(t, s, bad, "%s leaks %q", where, bad)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, project("1", "a")) })
			tt.setup(f)
			c := f.client()
			call := tt.call
			if call == nil {
				call = func(c *Client) error { _, err := c.GetProject(context.Background(), "1"); return err }
			}
			err := call(c)
			require.Error(t, err)
			check(t, "error", err.Error())
			check(t, "error %+v", fmt.Sprintf("%+v", err))
			for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
				check(t, "wrapped error", u.Error())
			}
			for _, l := range f.logs.all() {
				check(t, "log line", l)
			}
			assert.NotEmpty(t, f.logs.all(), "the failure was logged")
		})
	}
	t.Run("invalid URLs in NewClient", func(t *testing.T) {
		for _, u := range []string{"http://user:" + testSecret + "@host", "::" + testSecret, testSecret + "://x", "http://[" + testSecret} {
			_, err := NewClient(ClientConfig{BaseURL: u, ClientID: "id", ClientSecret: testSecret})
			require.Error(t, err, u)
			check(t, "NewClient error", err.Error())
		}
	})
}
