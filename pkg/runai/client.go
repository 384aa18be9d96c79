package runai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// ClientConfig configures NewClient.
type ClientConfig struct {
	// BaseURL is the control plane, e.g. http://127.0.0.1:8080 or
	// https://tenant.run.ai; a path prefix is kept. No credentials, query or fragment.
	BaseURL      string
	ClientID     string
	ClientSecret string
	// ClusterName selects the cluster by name (or by UUID); "" = the only cluster.
	ClusterName string
	// HTTPClient is used for every request, token requests included.
	// nil = a keep-alive client with dial and TLS timeouts of 5s and pooled idle connections.
	HTTPClient *http.Client
	// Logger gets one V(1) line per HTTP request; it never sees a secret or token.
	Logger logr.Logger
	// Retry bounds automatic retries of GET and DELETE; zero value = defaults.
	Retry RetryPolicy
	// PollInterval is the WaitProjectGone poll period; 0 = 500ms.
	PollInterval time.Duration
	// Observer receives call and token metrics; nil = none.
	Observer Observer
}

// Observer receives one ObserveCall per HTTP request to the API (every
// attempt, including retries and the retry after a 401) and one
// ObserveTokenRefresh per token endpoint tried. It feeds Prometheus.
type Observer interface {
	// ObserveCall reports one request of operation op; status 0 = no answer.
	ObserveCall(op string, status int, d time.Duration)
	// ObserveTokenRefresh reports one token request to endpoint (a path,
	// TokenPathV2 or TokenPathV1); err is nil on success.
	ObserveTokenRefresh(endpoint string, err error)
}

// Paging, body and message limits.
const (
	// PageLimit is the limit sent on list calls (the vendor maximum).
	PageLimit = 500
	// MaxPages bounds a list call against a server whose next never ends.
	MaxPages = 1000
	// MaxBodyBytes is the largest response body read; a larger 2xx body is an error.
	MaxBodyBytes = 1 << 20
	// DefaultPollInterval is the WaitProjectGone default.
	DefaultPollInterval = 500 * time.Millisecond

	maxMessage = 512
	userAgent  = "runai-webhook"
)

// Paths of the vendor API (API-NOTES §2–§5).
const (
	pathClusters    = "/api/v1/clusters"
	pathNodePools   = "/api/v1/node-pools"
	pathDepartments = "/api/v1/org-unit/departments"
	pathProjects    = "/api/v1/org-unit/projects"
	pathNodesTelem  = "/api/v1/nodes/telemetry"
)

// Client is the Run:ai REST client. It is safe for concurrent use.
type Client struct {
	base        string // BaseURL without trailing slash
	clusterName string
	hc          *http.Client
	log         logr.Logger
	retry       RetryPolicy
	poll        time.Duration
	obs         Observer
	tokens      *tokenSource
	red         *redactor

	// sleep waits between retries; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// maxPages bounds list paging; tests lower it.
	maxPages int

	mu      sync.Mutex
	cluster *Cluster
}

var _ API = (*Client)(nil)

// NewClient validates cfg and returns a client. It does not contact Run:ai.
func NewClient(cfg ClientConfig) (*Client, error) {
	red := newRedactor(cfg.ClientSecret, nil)
	base, err := validateBaseURL(cfg.BaseURL, red)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.ClientID) == "" {
		return nil, errors.New("run:ai client: ClientID is empty")
	}
	if strings.TrimSpace(cfg.ClientSecret) == "" {
		return nil, errors.New("run:ai client: ClientSecret is empty")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	poll := cfg.PollInterval
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	ts := &tokenSource{
		baseURL:      base,
		clientID:     cfg.ClientID,
		clientSecret: cfg.ClientSecret,
		hc:           hc,
		log:          cfg.Logger,
		obs:          obs,
		now:          time.Now,
	}
	red.tokens = ts.knownTokens
	ts.red = red
	return &Client{
		base:        base,
		clusterName: cfg.ClusterName,
		hc:          hc,
		log:         cfg.Logger,
		retry:       cfg.Retry.withDefaults(),
		poll:        poll,
		obs:         obs,
		tokens:      ts,
		red:         red,
		sleep:       sleepCtx,
		maxPages:    MaxPages,
	}, nil
}

func validateBaseURL(raw string, red *redactor) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", errors.New("run:ai client: BaseURL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the input; never echo it (it could hold credentials).
		return "", errors.New("run:ai client: BaseURL is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("run:ai client: BaseURL must be an absolute http or https URL, got scheme %q", red.clean(u.Scheme))
	}
	if u.Host == "" {
		return "", errors.New("run:ai client: BaseURL has no host")
	}
	if u.User != nil {
		return "", errors.New("run:ai client: BaseURL must not contain credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("run:ai client: BaseURL must not have a query or fragment")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// defaultHTTPClient is a keep-alive client with bounded dial, TLS and header
// waits. The overall bound of a call is its context.
func defaultHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			ExpectContinueTimeout: time.Second,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		Timeout: 60 * time.Second,
	}
}

type nopObserver struct{}

func (nopObserver) ObserveCall(string, int, time.Duration) {}
func (nopObserver) ObserveTokenRefresh(string, error)      {}

// ---------------------------------------------------------------------------
// Operations

// Cluster returns the configured cluster: the one whose name (or UUID) is
// ClusterName, or the only cluster when ClusterName is empty. The answer is
// cached for the life of the client. No cluster, an unknown name → KindNotFound;
// several clusters and no name, or a name held by several → KindInvalid.
func (c *Client) Cluster(ctx context.Context) (Cluster, error) {
	c.mu.Lock()
	cached := c.cluster
	c.mu.Unlock()
	if cached != nil {
		return *cached, nil
	}
	const op = "list clusters"
	var clusters []Cluster
	if _, err := c.do(ctx, request{op: op, method: http.MethodGet, path: pathClusters, out: &clusters}); err != nil {
		return Cluster{}, err
	}
	cl, err := pickCluster(clusters, c.clusterName)
	if err != nil {
		return Cluster{}, err
	}
	c.mu.Lock()
	c.cluster = &cl
	c.mu.Unlock()
	return cl, nil
}

func pickCluster(clusters []Cluster, name string) (Cluster, error) {
	const op = "select cluster"
	names := make([]string, 0, len(clusters))
	for _, cl := range clusters {
		names = append(names, cl.Name)
	}
	sort.Strings(names)
	have := strings.Join(names, ", ")
	if name == "" {
		switch len(clusters) {
		case 0:
			return Cluster{}, &Error{Kind: KindNotFound, Op: op, Message: "Run:ai has no cluster"}
		case 1:
			return clusters[0], nil
		default:
			return Cluster{}, &Error{Kind: KindInvalid, Op: op,
				Message: fmt.Sprintf("%d clusters and no cluster name configured; set one of: %s", len(clusters), have)}
		}
	}
	var byName []Cluster
	for _, cl := range clusters {
		if cl.Name == name {
			byName = append(byName, cl)
		}
	}
	switch len(byName) {
	case 1:
		return byName[0], nil
	case 0:
		for _, cl := range clusters {
			if cl.UUID == name {
				return cl, nil
			}
		}
		return Cluster{}, &Error{Kind: KindNotFound, Op: op, Message: fmt.Sprintf("no cluster named %q (have: %s)", name, have)}
	default:
		return Cluster{}, &Error{Kind: KindInvalid, Op: op,
			Message: fmt.Sprintf("%d clusters are named %q; configure the cluster UUID instead", len(byName), name)}
	}
}

// DefaultNodePool returns the cluster's node pool marked isDefault, else the
// one named "default"; KindNotFound when neither exists.
func (c *Client) DefaultNodePool(ctx context.Context, clusterID string) (NodePool, error) {
	const op = "list node pools"
	if err := requireID(op, "cluster id", clusterID); err != nil {
		return NodePool{}, err
	}
	q := url.Values{}
	q.Add("filterBy", "clusterId=="+clusterID)
	q.Set("limit", strconv.Itoa(PageLimit))
	var list NodePoolList
	if _, err := c.do(ctx, request{op: op, method: http.MethodGet, path: pathNodePools, query: q, out: &list}); err != nil {
		return NodePool{}, err
	}
	var named *NodePool
	for i := range list.NodePools {
		np := &list.NodePools[i]
		if np.ClusterID != "" && np.ClusterID != clusterID {
			continue // the server ignored the filter
		}
		if np.IsDefault {
			return *np, nil
		}
		if np.Name == "default" && named == nil {
			named = np
		}
	}
	if named != nil {
		return *named, nil
	}
	return NodePool{}, &Error{Kind: KindNotFound, Op: op,
		Message: fmt.Sprintf("cluster %s has no node pool marked default and none named \"default\"", clusterID)}
}

// ListDepartments lists the cluster's departments with status
// (verbosity=verbose), following every page. A non-empty name keeps only
// that department. Items of another cluster or name are dropped even if the
// server ignored the filter.
func (c *Client) ListDepartments(ctx context.Context, clusterID, name string) ([]Department, error) {
	const op = "list departments"
	if err := requireID(op, "cluster id", clusterID); err != nil {
		return nil, err
	}
	q := listQuery(clusterID, name)
	q.Set("verbosity", "verbose")
	var out []Department
	err := c.paginate(ctx, op, pathDepartments, q, func() (any, func()) {
		var page DepartmentList
		return &page, func() {
			for _, d := range page.Departments {
				if (d.ClusterID == "" || d.ClusterID == clusterID) && (name == "" || d.Name == name) {
					out = append(out, d)
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetDepartment returns one department.
func (c *Client) GetDepartment(ctx context.Context, id string) (Department, error) {
	const op = "get department"
	if err := requireID(op, "department id", id); err != nil {
		return Department{}, err
	}
	var d Department
	_, err := c.do(ctx, request{op: op, method: http.MethodGet, path: pathDepartments + "/" + url.PathEscape(id), out: &d})
	return d, err
}

// ListProjects lists the cluster's projects, following every page. A
// non-empty name keeps only that project.
func (c *Client) ListProjects(ctx context.Context, clusterID, name string) ([]Project, error) {
	const op = "list projects"
	if err := requireID(op, "cluster id", clusterID); err != nil {
		return nil, err
	}
	var out []Project
	err := c.paginate(ctx, op, pathProjects, listQuery(clusterID, name), func() (any, func()) {
		var page ProjectList
		return &page, func() {
			for _, p := range page.Projects {
				if (p.ClusterID == "" || p.ClusterID == clusterID) && (name == "" || p.Name == name) {
					out = append(out, p)
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetProject returns one project; KindNotFound when it does not exist.
func (c *Client) GetProject(ctx context.Context, id string) (Project, error) {
	const op = "get project"
	if err := requireID(op, "project id", id); err != nil {
		return Project{}, err
	}
	var p Project
	_, err := c.do(ctx, request{op: op, method: http.MethodGet, path: pathProjects + "/" + url.PathEscape(id), out: &p})
	return p, err
}

// CreateProject creates a project (201). It is never retried automatically:
// after an Unavailable error the project may or may not exist, so callers
// look it up by name before trying again. 409 → KindConflict.
func (c *Client) CreateProject(ctx context.Context, req ProjectCreationRequest) (Project, error) {
	const op = "create project"
	if req.Resources == nil {
		req.Resources = []Resources{} // required by the vendor schema
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Project{}, &Error{Kind: KindInvalid, Op: op, Message: "encode request", Err: sanitize(c.red, err)}
	}
	var p Project
	_, err = c.do(ctx, request{op: op, method: http.MethodPost, path: pathProjects, body: body, out: &p})
	return p, err
}

// DeleteProject asks Run:ai to delete a project and returns without waiting.
// 202 and 204 are success; 404 is success too (already gone), so the call is
// idempotent.
func (c *Client) DeleteProject(ctx context.Context, id string) error {
	const op = "delete project"
	if err := requireID(op, "project id", id); err != nil {
		return err
	}
	_, err := c.do(ctx, request{op: op, method: http.MethodDelete, path: pathProjects + "/" + url.PathEscape(id)})
	if IsNotFound(err) {
		return nil
	}
	return err
}

// WaitProjectGone polls GetProject every PollInterval until it answers 404.
// Transient failures (Unavailable, RateLimited) keep it polling; any other
// failure is returned. When ctx ends first it returns a KindUnavailable error
// wrapping ctx.Err().
func (c *Client) WaitProjectGone(ctx context.Context, id string) error {
	const op = "wait project gone"
	if err := requireID(op, "project id", id); err != nil {
		return err
	}
	t := time.NewTicker(c.poll)
	defer t.Stop()
	lastPhase := ""
	for {
		p, err := c.GetProject(ctx, id)
		switch {
		case IsNotFound(err):
			return nil
		case err == nil:
			lastPhase = p.Status.Phase
		case IsUnavailable(err):
		default:
			return err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("project %s still present", id)
			if lastPhase != "" {
				msg += " (phase " + lastPhase + ")"
			}
			return &Error{Kind: KindUnavailable, Op: op, Message: msg, Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// FreeGPUs returns the FREE_GPUS telemetry of one node pool: the value whose
// Nodepool group names the pool, or the only value when there is one.
func (c *Client) FreeGPUs(ctx context.Context, clusterID, nodePoolName string) (float64, error) {
	const op = "free gpus"
	if err := requireID(op, "cluster id", clusterID); err != nil {
		return 0, err
	}
	if err := requireID(op, "node pool name", nodePoolName); err != nil {
		return 0, err
	}
	q := url.Values{}
	q.Set("telemetryType", "FREE_GPUS")
	q.Set("clusterId", clusterID)
	q.Set("nodepoolName", nodePoolName)
	q.Set("groupBy", "Nodepool")
	var tr TelemetryResponse
	if _, err := c.do(ctx, request{op: op, method: http.MethodGet, path: pathNodesTelem, query: q, out: &tr}); err != nil {
		return 0, err
	}
	v, ok := pickTelemetry(tr.Values, nodePoolName)
	if !ok {
		return 0, &Error{Kind: KindNotFound, Op: op,
			Message: fmt.Sprintf("no FREE_GPUS value for node pool %q (%d values)", nodePoolName, len(tr.Values))}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	// ParseFloat takes "NaN" and "Inf"; neither is a number of GPUs (and
	// neither survives JSON encoding in the GPU view).
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, &Error{Kind: KindUnknown, Op: op, Message: fmt.Sprintf("FREE_GPUS value %q is not a number", truncate(v, 64))}
	}
	return f, nil
}

func pickTelemetry(values []TelemetryValue, nodePool string) (string, bool) {
	for _, v := range values {
		for _, g := range v.Groups {
			if strings.EqualFold(g.Key, "Nodepool") && (g.Value == nodePool || g.Name == nodePool) {
				return v.Value, true
			}
		}
	}
	if len(values) == 1 {
		return values[0].Value, true
	}
	return "", false
}

// listQuery is the filter of a list call: filterBy repeated once per filter.
// listQuery builds the filterBy parameter. The vendor declares it
// explode:false, so several filters travel as one comma-separated value; a
// server following the document would read only the first of repeated ones.
// Names cannot hold a comma (Kubernetes and Run:ai name rules).
func listQuery(clusterID, name string) url.Values {
	filters := "clusterId==" + clusterID
	if name != "" {
		filters += ",name==" + name
	}
	return url.Values{"filterBy": {filters}}
}

func requireID(op, what, v string) error {
	if strings.TrimSpace(v) == "" || v == "." || v == ".." {
		return &Error{Kind: KindInvalid, Op: op, Message: what + " is empty or invalid"}
	}
	return nil
}

// paginate follows offset paging: limit=PageLimit, the answer's next is the
// next offset, a missing next (or an empty page) ends. newPage returns a
// decode target and a function that consumes it after decoding.
func (c *Client) paginate(ctx context.Context, op, path string, q url.Values, newPage func() (any, func())) error {
	offset := 0
	for page := 0; ; page++ {
		if page >= c.maxPages {
			return &Error{Kind: KindUnknown, Op: op, Message: fmt.Sprintf("gave up after %d pages: the server never ended the list", c.maxPages)}
		}
		pq := url.Values{}
		for k, v := range q {
			pq[k] = append([]string(nil), v...)
		}
		pq.Set("limit", strconv.Itoa(PageLimit))
		pq.Set("offset", strconv.Itoa(offset))
		target, consume := newPage()
		if _, err := c.do(ctx, request{op: op, method: http.MethodGet, path: path, query: pq, out: target}); err != nil {
			return err
		}
		consume()
		next, n := pageInfo(target)
		if next == nil || n == 0 {
			return nil
		}
		if *next <= offset {
			return &Error{Kind: KindUnknown, Op: op, Message: fmt.Sprintf("server answered next=%d at offset %d; refusing to loop", *next, offset)}
		}
		offset = *next
	}
}

func pageInfo(target any) (next *int, n int) {
	switch p := target.(type) {
	case *ProjectList:
		return p.Next, len(p.Projects)
	case *DepartmentList:
		return p.Next, len(p.Departments)
	}
	return nil, 0
}

// ---------------------------------------------------------------------------
// Transport

type request struct {
	op     string
	method string
	path   string // escaped, starting with /
	query  url.Values
	body   []byte // JSON; nil = none
	out    any    // decoded from a 2xx body when non-nil
}

// do runs r with retries (idempotent methods only) and returns the final
// HTTP status. Every error is *Error.
func (c *Client) do(ctx context.Context, r request) (int, error) {
	attempts := 1
	if idempotent(r.method) {
		attempts = c.retry.MaxAttempts
	}
	var lastErr error
	for attempt := 1; ; attempt++ {
		status, err := c.once(ctx, r, attempt)
		if err == nil {
			return status, nil
		}
		lastErr = err
		if attempt >= attempts || !retryable(err) || ctx.Err() != nil {
			return status, lastErr
		}
		delay := c.retry.backoff(attempt)
		var e *Error
		if errors.As(err, &e) && e.RetryAfter > 0 {
			if e.RetryAfter > c.retry.MaxRetryAfter {
				return status, lastErr
			}
			delay = e.RetryAfter
		}
		if !fitsDeadline(ctx, delay) {
			return status, lastErr
		}
		c.log.V(1).Info("run:ai call retrying", "op", r.op, "attempt", attempt, "delay", delay.String(), "error", err.Error())
		if c.sleep(ctx, delay) != nil {
			return status, lastErr
		}
	}
}

// once sends r, refreshing the token and resending once on a 401.
func (c *Client) once(ctx context.Context, r request, attempt int) (int, error) {
	for refreshed := false; ; refreshed = true {
		tok, err := c.tokens.TokenContext(ctx)
		if err != nil {
			return 0, tokenCallError(r.op, err)
		}
		status, err := c.send(ctx, r, tok.AccessToken, attempt)
		if status == http.StatusUnauthorized && !refreshed {
			c.log.V(1).Info("run:ai answered 401; refreshing the token once", "op", r.op)
			c.tokens.invalidate(tok.AccessToken)
			continue
		}
		return status, err
	}
}

// tokenCallError renames a token failure after the call that needed it.
func tokenCallError(op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		cp := *e
		cp.Op = op + ": " + e.Op
		return &cp
	}
	return &Error{Kind: KindUnknown, Op: op + ": " + opToken}
}

func (c *Client) send(ctx context.Context, r request, token string, attempt int) (status int, err error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return 0, &Error{Kind: KindInvalid, Op: r.op, Message: "build request", Err: sanitize(c.red, err)}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	start := time.Now()
	defer func() {
		d := time.Since(start)
		c.obs.ObserveCall(r.op, status, d)
		kv := []any{"op", r.op, "method", r.method, "path", r.path, "status", status, "duration", d.String(), "attempt", attempt}
		if err != nil {
			kv = append(kv, "error", err.Error())
		}
		c.log.V(1).Info("run:ai call", kv...)
	}()

	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, transportError(c.red, r.op, ctx, err)
	}
	b, tooLarge, rerr := readBody(resp.Body)
	resp.Body.Close()
	status = resp.StatusCode
	if status < 200 || status > 299 {
		return status, statusError(c.red, r.op, status, resp.Header, b)
	}
	if rerr != nil {
		return status, transportError(c.red, r.op, ctx, rerr)
	}
	if tooLarge {
		return status, tooLargeError(r.op, status)
	}
	if r.out != nil && status != http.StatusNoContent {
		if err := json.Unmarshal(b, r.out); err != nil {
			return status, &Error{Kind: KindUnknown, Op: r.op, Status: status,
				Message: "cannot decode the answer", Err: sanitize(c.red, err)}
		}
	}
	return status, nil
}

// ---------------------------------------------------------------------------
// Errors

// KindForStatus maps a non-2xx HTTP status to a Kind.
func KindForStatus(status int) Kind {
	switch {
	case status == http.StatusBadRequest, status == http.StatusUnprocessableEntity:
		return KindInvalid
	case status == http.StatusUnauthorized:
		return KindUnauthorized
	case status == http.StatusForbidden:
		return KindForbidden
	case status == http.StatusNotFound:
		return KindNotFound
	case status == http.StatusConflict:
		return KindConflict
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status >= 500 && status <= 599:
		return KindUnavailable
	}
	return KindUnknown
}

// statusError builds the *Error of a non-2xx answer: Kind from the status,
// Message from the vendor Error body (or the truncated raw body), redacted.
func statusError(red *redactor, op string, status int, header http.Header, body []byte) *Error {
	e := &Error{Kind: KindForStatus(status), Op: op, Status: status}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		e.RetryAfter = parseRetryAfter(header.Get("Retry-After"), time.Now())
	}
	e.Message = bodyMessage(red, body)
	return e
}

// bodyMessage is message[: details] of a vendor Error body, else the body
// itself, single-line, redacted (before truncation, so no partial secret
// survives) and truncated.
func bodyMessage(red *redactor, body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var ae APIError
	if json.Unmarshal(body, &ae) == nil && ae.Message != "" {
		msg := ae.Message
		if ae.Details != "" {
			msg += ": " + ae.Details
		}
		return truncate(oneLine(red.clean(msg)), maxMessage)
	}
	return truncate(oneLine(red.clean(string(body))), maxMessage)
}

// transportError is the *Error of a request that got no usable answer.
func transportError(red *redactor, op string, ctx context.Context, err error) *Error {
	e := &Error{Kind: KindUnavailable, Op: op, Err: sanitize(red, err)}
	var ue *url.Error
	var ne net.Error
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		e.Message = "no answer before the context ended"
	case isTimeout(err):
		e.Message = "timed out"
	case errors.As(err, &ue), errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
	default:
		e.Kind = KindUnknown
	}
	return e
}

func tooLargeError(op string, status int) *Error {
	return &Error{Kind: KindUnknown, Op: op, Status: status,
		Message: fmt.Sprintf("answer larger than %d bytes refused", MaxBodyBytes)}
}

// readBody reads at most MaxBodyBytes; tooLarge reports a longer body (the
// returned bytes are then the first MaxBodyBytes).
func readBody(r io.Reader) (b []byte, tooLarge bool, err error) {
	b, err = io.ReadAll(io.LimitReader(r, MaxBodyBytes+1))
	if len(b) > MaxBodyBytes {
		return b[:MaxBodyBytes], true, err
	}
	return b, false, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func formEscape(s string) string { return url.QueryEscape(s) }

var bearerRE = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9\-._~+/]+=*`)
