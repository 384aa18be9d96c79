package runai

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// Fuzzers of everything the client decodes from Run:ai: list, object and
// telemetry answers (FuzzDecodeProjectList), error bodies
// (FuzzErrorBody), Retry-After (FuzzRetryAfter) and token answers
// (FuzzTokenAnswer). A control plane that answers garbage must get a typed
// *Error with a bounded, single-line, redacted message: never a panic, an
// endless paging loop, an unbounded read, or the secret in an error.

// fuzzToken is an access token the fuzz server issues; it must never show
// up in an error either.
const fuzzToken = "fuzz-access-token-5d1b7e"

// fuzzServer answers the token endpoints with fuzzToken and every API path
// with the current body; one per fuzz process, its body swapped per input.
type fuzzServer struct {
	srv *httptest.Server

	mu          sync.Mutex
	status      int
	body        []byte
	header      http.Header
	tokenBody   []byte // nil: a valid token answer
	tokenStatus int
	tokenCT     string
	apiCalls    atomic.Int32
}

func newFuzzServer(f *testing.F) *fuzzServer {
	fs := &fuzzServer{}
	fs.srv = httptest.NewServer(http.HandlerFunc(fs.serve))
	f.Cleanup(fs.srv.Close)
	return fs
}

func (fs *fuzzServer) set(status int, body []byte, header http.Header) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.status, fs.body, fs.header, fs.tokenBody = status, body, header, nil
	fs.apiCalls.Store(0)
}

func (fs *fuzzServer) setToken(status int, ct string, body []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.tokenStatus, fs.tokenCT, fs.tokenBody = status, ct, body
	fs.status, fs.body = http.StatusOK, []byte(`{"projects":[]}`)
	fs.apiCalls.Store(0)
}

func (fs *fuzzServer) serve(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	status, body, header := fs.status, fs.body, fs.header
	tokenBody, tokenStatus, tokenCT := fs.tokenBody, fs.tokenStatus, fs.tokenCT
	fs.mu.Unlock()
	switch r.URL.Path {
	case TokenPathV2, TokenPathV1:
		if tokenBody != nil {
			w.Header().Set("Content-Type", tokenCT)
			w.WriteHeader(tokenStatus)
			_, _ = w.Write(tokenBody)
			return
		}
		if r.URL.Path == TokenPathV1 {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"` + fuzzToken + `","token_type":"Bearer","expires_in":3600}`))
		return
	}
	fs.apiCalls.Add(1)
	for k, vs := range header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (fs *fuzzServer) client(t *testing.T) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{
		BaseURL: fs.srv.URL, ClientID: testClientID, ClientSecret: testSecret,
		// One attempt: a fuzzed 503 with Retry-After must not make the
		// fuzzer sleep.
		Retry:        RetryPolicy{MaxAttempts: 1},
		PollInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkClientError: every failure is a *Error naming the operation, with a
// bounded single-line message free of the secret and the token.
func checkClientError(t *testing.T, op string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %T is not a *Error: %v", op, err, err)
	}
	if !strings.HasPrefix(e.Op, op) {
		t.Fatalf("%s: error names operation %q: %v", op, e.Op, err)
	}
	checkMessage(t, e.Message)
	s := err.Error()
	if strings.Contains(s, testSecret) || strings.Contains(s, fuzzToken) {
		t.Fatalf("%s: error leaks a credential: %s", op, s)
	}
	if len(s) > 4096 {
		t.Fatalf("%s: error of %d bytes", op, len(s))
	}
}

func checkMessage(t *testing.T, msg string) {
	t.Helper()
	if len(msg) > maxMessage+len("…") {
		t.Fatalf("message of %d bytes, want at most %d: %.80q", len(msg), maxMessage, msg)
	}
	if strings.ContainsAny(msg, "\n\r\t") {
		t.Fatalf("message spans lines: %q", msg)
	}
	if strings.Contains(msg, testSecret) || strings.Contains(msg, fuzzToken) {
		t.Fatalf("message leaks a credential: %q", msg)
	}
}

// FuzzDecodeProjectList serves arbitrary bytes as the 200 answer of every
// read the webhook makes (projects and departments with paging, one
// project, one department, clusters, node pools, telemetry). Each call
// returns data or a *Error; paging over a body whose next never ends stops
// (at most two pages: the same answer twice is refused as a loop); a body
// over MaxBodyBytes is refused, not decoded.
func FuzzDecodeProjectList(f *testing.F) {
	for _, s := range []string{
		`{"projects":[{"id":"1","name":"a","clusterId":"` + testClusterID + `","status":{"phase":"Ready","namespace":"a"}}]}`,
		`{"projects":[{"id":"1","name":"a"}],"next":1}`,
		`{"projects":[{"id":"1"}],"next":0}`,
		`{"projects":[{"id":"1"}],"next":-5}`,
		`{"projects":null,"next":99999999999}`,
		`{"departments":[{"id":"2","name":"d","clusterId":"` + testClusterID + `"}],"next":2}`,
		`[{"uuid":"` + testClusterID + `","name":"c"}]`,
		`{"nodepools":[{"id":"3","name":"default","isDefault":true}]}`,
		`{"type":"FREE_GPUS","values":[{"value":"3","groups":[{"key":"Nodepool","value":"default"}]}]}`,
		`{"projects":[{"id":1}]}`,
		`{"projects":[{"resources":[{"gpu":{"deserved":"x"}}]}]}`,
		`null`, ``, `{`, `[[[[[[[[[[`, "\x00\xff",
	} {
		f.Add([]byte(s))
	}
	fs := newFuzzServer(f)
	var c *Client // one per fuzzing process: its token is fetched once
	f.Fuzz(func(t *testing.T, body []byte) {
		fs.set(http.StatusOK, body, nil)
		if c == nil {
			c = fs.client(t)
		}
		c.mu.Lock()
		c.cluster = nil // Cluster caches its answer: decode every body
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		projects, err := c.ListProjects(ctx, testClusterID, "")
		checkClientError(t, "list projects", err)
		if n := fs.apiCalls.Load(); n > 2 {
			t.Fatalf("list projects made %d calls for an answer that repeats itself", n)
		}
		if len(body) > MaxBodyBytes && err == nil {
			t.Fatalf("a body of %d bytes was decoded", len(body))
		}
		for _, p := range projects {
			if p.ClusterID != "" && p.ClusterID != testClusterID {
				t.Fatalf("project of cluster %q kept", p.ClusterID)
			}
		}
		fs.apiCalls.Store(0)
		depts, err := c.ListDepartments(ctx, testClusterID, "d")
		checkClientError(t, "list departments", err)
		if n := fs.apiCalls.Load(); n > 2 {
			t.Fatalf("list departments made %d calls", n)
		}
		for _, d := range depts {
			if d.Name != "d" {
				t.Fatalf("department %q kept by a filter on d", d.Name)
			}
		}
		_, err = c.GetProject(ctx, "1")
		checkClientError(t, "get project", err)
		_, err = c.GetDepartment(ctx, "2")
		checkClientError(t, "get department", err)
		_, err = c.Cluster(ctx)
		if e := (*Error)(nil); errors.As(err, &e) && e.Op == "select cluster" {
			checkClientError(t, "select cluster", err) // decoded, but no usable cluster
		} else {
			checkClientError(t, "list clusters", err)
		}
		_, err = c.DefaultNodePool(ctx, testClusterID)
		checkClientError(t, "list node pools", err)
		free, err := c.FreeGPUs(ctx, testClusterID, "default")
		checkClientError(t, "free gpus", err)
		if err == nil && (math.IsNaN(free) || math.IsInf(free, 0)) {
			t.Fatalf("free GPUs is %v", free)
		}
	})
}

// FuzzErrorBody: any status from 400 to 599 with any body and Retry-After
// becomes a *Error whose Kind follows the status, whose message is one
// bounded line without the secret or a token (redacted before it is cut),
// and whose RetryAfter is set only for 429 and 503 and never negative.
func FuzzErrorBody(f *testing.F) {
	f.Add(503, []byte(`{"code":503,"message":"Service Unavailable","details":"try later"}`), "2")
	f.Add(429, []byte(`{"code":429,"message":"Too Many Requests"}`), "Wed, 21 Oct 2099 07:28:00 GMT")
	f.Add(401, []byte(`{"code":401,"message":"Issuer is not familiar."}`), "")
	f.Add(409, []byte(`{"code":409,"message":"project with name a already exists"}`), "")
	f.Add(400, []byte(`{"message":"bad secret `+testSecret+` in\nthe request"}`), "")
	f.Add(500, []byte("<html>\n<body>Bearer "+fuzzToken+"</body></html>"), "-1")
	f.Add(502, []byte(strings.Repeat("é", 600)), "99999999999999999999")
	f.Add(422, []byte(`{"message":"a","details":"`+strings.Repeat("x\\n", 300)+`"}`), " 3 ")
	f.Add(404, []byte{}, "")
	f.Add(599, []byte("\xff\xfe\x00"), "0")
	red := newRedactor(testSecret, func() []string { return []string{fuzzToken} })
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		if status < 0 {
			status = -(status + 1)
		}
		status = 400 + status%200
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		e := statusError(red, "create project", status, h, body)
		if e.Kind != KindForStatus(status) || e.Status != status || e.Op != "create project" {
			t.Fatalf("status %d: kind %v, status %d, op %q", status, e.Kind, e.Status, e.Op)
		}
		// Every 5xx is "unavailable" (retried, "retry later" in admission);
		// a 4xx the client has no kind for is unknown, never retried.
		if status >= 500 && e.Kind != KindUnavailable {
			t.Fatalf("status %d is %v, not unavailable", status, e.Kind)
		}
		if retryable(e) && status < 500 && status != http.StatusTooManyRequests {
			t.Fatalf("status %d would be retried", status)
		}
		checkMessage(t, e.Message)
		if !utf8.ValidString(strings.TrimSuffix(e.Message, "…")) && utf8.Valid(body) {
			t.Fatalf("a valid UTF-8 body gave an invalid message %q", e.Message)
		}
		if e.RetryAfter < 0 || e.RetryAfter > 24*time.Hour+time.Minute {
			t.Fatalf("Retry-After %q gave %s", retryAfter, e.RetryAfter)
		}
		if e.RetryAfter != 0 && status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
			t.Fatalf("Retry-After kept on status %d", status)
		}
		if s := e.Error(); strings.Contains(s, testSecret) || strings.Contains(s, fuzzToken) {
			t.Fatalf("error leaks a credential: %s", s)
		}
	})
}

// FuzzRetryAfter: delta seconds or an HTTP date, never negative, at most a
// day; anything else is 0.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "1", "120", "-1", "86401", "9223372036854775807", "1.5", " 7 ",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Sun, 06 Nov 2094 08:49:37 GMT", "Monday", "\x00"} {
		f.Add(s)
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d := parseRetryAfter(v, now)
		if d < 0 {
			t.Fatalf("%q: negative %s", v, d)
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			want := time.Duration(0)
			if n > 0 {
				want = time.Duration(min(n, 86400)) * time.Second
			}
			if d != want {
				t.Fatalf("%q: %s, want %s", v, d, want)
			}
			return
		}
		if _, err := http.ParseTime(strings.TrimSpace(v)); err != nil && d != 0 {
			t.Fatalf("%q is neither seconds nor a date, yet gave %s", v, d)
		}
	})
}

// FuzzTokenAnswer serves arbitrary token answers (both endpoints, any
// status and content type): the call that needed the token fails with a
// bounded single-line *Error that never carries the client secret (a token
// that came only in an error body was never ours, so it is not redacted),
// or succeeds with a token the API accepted.
func FuzzTokenAnswer(f *testing.F) {
	f.Add(200, "application/json", []byte(`{"access_token":"`+fuzzToken+`","token_type":"Bearer","expires_in":3600}`))
	f.Add(200, "application/json", []byte(`{"accessToken":"`+fuzzToken+`","expiresIn":-3}`))
	f.Add(200, "application/x-www-form-urlencoded", []byte(`access_token=`+fuzzToken+`&token_type=bearer&expires_in=x`))
	f.Add(200, "application/json", []byte(`{"access_token":""}`))
	f.Add(401, "application/json", []byte(`{"error":"invalid_client","error_description":"client secret `+testSecret+` is wrong"}`))
	f.Add(400, "text/plain", []byte("client_secret="+testSecret))
	f.Add(500, "application/json", []byte(`{"code":500,"message":"boom"}`))
	f.Add(200, "application/json", []byte(`{"access_token":"`+fuzzToken+`","expires_in":1e309}`))
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, status int, contentType string, body []byte) {
		if status < 200 || status > 599 {
			if status < 0 {
				status = -(status + 1)
			}
			status = 200 + status%400
		}
		if status >= 300 && status < 400 {
			status += 100 // no redirects: they are the transport's business
		}
		fs.setToken(status, contentType, body)
		c := fs.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.ListProjects(ctx, testClusterID, "")
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T is not a *Error: %v", err, err)
		}
		if len(e.Message) > maxMessage+len("…") || strings.ContainsAny(e.Message, "\n\r\t") {
			t.Fatalf("message not one bounded line: %q", e.Message)
		}
		if s := err.Error(); strings.Contains(s, testSecret) {
			t.Fatalf("error leaks the secret: %s", s)
		}
	})
}
