package runai

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// authRecorder answers a project and records the bearer tokens it saw.
type authRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (a *authRecorder) handler(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Header.Get("Authorization"))
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, project("1", "a"))
}

func (a *authRecorder) tokens() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func TestTokenReuse(t *testing.T) {
	rec := &authRecorder{}
	f := newFake(t, rec.handler)
	c := f.client()
	for range 20 {
		_, err := c.GetProject(context.Background(), "1")
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := c.GetProject(context.Background(), "1")
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), f.v2Reqs.Load(), "one token request for 40 calls")
	assert.Equal(t, int32(40), f.apiReqs.Load())
	for _, h := range rec.tokens() {
		assert.Equal(t, "Bearer tok-1", h)
	}
}

func TestTokenReuseConcurrentFirstFetchShared(t *testing.T) {
	gate := make(chan struct{})
	f := newFake(t, (&authRecorder{}).handler)
	f.v2 = func(w http.ResponseWriter, r *http.Request) {
		<-gate // hold the first fetch until every caller waits on it
		f.defaultV2(w, r)
	}
	c := f.client()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := c.GetProject(context.Background(), "1")
			assert.NoError(t, err)
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(gate)
	wg.Wait()
	assert.Equal(t, int32(1), f.v2Reqs.Load(), "concurrent callers share one fetch")
}

func TestTokenEarlyWindow(t *testing.T) {
	tests := []struct{ lifetime, want time.Duration }{
		{2 * time.Second, 200 * time.Millisecond},
		{time.Minute, 6 * time.Second},
		{5 * time.Minute, 30 * time.Second},
		{10 * time.Minute, 60 * time.Second},
		{time.Hour, 60 * time.Second},
		{10 * time.Hour, 60 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.lifetime.String(), func(t *testing.T) {
			assert.Equal(t, tt.want, earlyWindow(tt.lifetime))
		})
	}
}

func TestTokenRefreshBeforeExpiry(t *testing.T) {
	tests := []struct {
		name      string
		expiresIn int64
		reuseAt   time.Duration // still the first token
		refreshAt time.Duration // a new token, although the first has not expired
	}{
		{"2s token, 10% window", 2, 1100 * time.Millisecond, 1850 * time.Millisecond},
		{"1h token, 60s cap", 3600, 3539 * time.Second, 3541 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &authRecorder{}
			f := newFake(t, rec.handler)
			f.expiresIn.Store(tt.expiresIn)
			c := f.client()
			clk := newFakeClock()
			c.tokens.now = clk.Now
			start := clk.Now()
			get := func() {
				t.Helper()
				_, err := c.GetProject(context.Background(), "1")
				require.NoError(t, err)
			}

			get()
			assert.Equal(t, int32(1), f.v2Reqs.Load())
			clk.Advance(tt.reuseAt - clk.Now().Sub(start))
			get()
			assert.Equal(t, int32(1), f.v2Reqs.Load(), "reused before the early window")
			clk.Advance(tt.refreshAt - clk.Now().Sub(start))
			require.Less(t, tt.refreshAt, time.Duration(tt.expiresIn)*time.Second, "still before expiry")
			get()
			assert.Equal(t, int32(2), f.v2Reqs.Load(), "refreshed inside the early window, before expiry")
			assert.Equal(t, []string{"Bearer tok-1", "Bearer tok-1", "Bearer tok-2"}, rec.tokens())
		})
	}
}

// TestTokenRefreshBeforeExpiryRealClock checks the same with the wall clock
// and a 1s token (early window 100ms).
func TestTokenRefreshBeforeExpiryRealClock(t *testing.T) {
	f := newFake(t, (&authRecorder{}).handler)
	f.expiresIn.Store(1)
	c := f.client()
	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	_, err = c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(1), f.v2Reqs.Load())
	time.Sleep(950 * time.Millisecond)
	_, err = c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(2), f.v2Reqs.Load())
}

func TestTokenRefreshFailureKeepsCachedToken(t *testing.T) {
	f := newFake(t, (&authRecorder{}).handler)
	f.expiresIn.Store(10)
	c := f.client(func(cfg *ClientConfig) { cfg.Retry.MaxAttempts = 1 })
	clk := newFakeClock()
	c.tokens.now = clk.Now
	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)

	var failing atomic.Bool
	failing.Store(true)
	f.v2 = func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			vendorError(http.StatusServiceUnavailable, "Please try again in few minutes.")(w, r)
			return
		}
		f.defaultV2(w, r)
	}
	clk.Advance(9500 * time.Millisecond) // inside the 1s early window, before expiry
	_, err = c.GetProject(context.Background(), "1")
	require.NoError(t, err, "a failed early refresh keeps the still-valid token")
	assert.Equal(t, int32(2), f.v2Reqs.Load())

	clk.Advance(time.Second) // now expired
	_, err = c.GetProject(context.Background(), "1")
	require.Error(t, err)
	assert.True(t, IsUnavailable(err), "%v", err)
	assert.Contains(t, err.Error(), "get project: fetch token")

	failing.Store(false)
	_, err = c.GetProject(context.Background(), "1")
	require.NoError(t, err)
}

func TestTokenForcedRefreshOn401(t *testing.T) {
	var n atomic.Int32
	rec := &authRecorder{}
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			vendorError(http.StatusUnauthorized, "Issuer is not familiar.")(w, r)
			return
		}
		rec.handler(w, r)
	})
	c := f.client()
	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(2), f.v2Reqs.Load(), "exactly one forced refresh")
	assert.Equal(t, int32(2), f.apiReqs.Load(), "the call was resent once")
	assert.Equal(t, []string{"Bearer tok-2"}, rec.tokens(), "resent with the new token")

	// The new token is cached: no further refresh.
	_, err = c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(2), f.v2Reqs.Load())
}

func TestTokenSecond401Unauthorized(t *testing.T) {
	tests := []struct {
		name string
		call func(*Client) error
	}{
		{"get", func(c *Client) error { _, err := c.GetProject(context.Background(), "1"); return err }},
		{"list", func(c *Client) error { _, err := c.ListProjects(context.Background(), testClusterID, ""); return err }},
		{"create", func(c *Client) error {
			_, err := c.CreateProject(context.Background(), ProjectCreationRequest{Name: "a", ClusterID: testClusterID})
			return err
		}},
		{"delete", func(c *Client) error { return c.DeleteProject(context.Background(), "1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, vendorError(http.StatusUnauthorized, "Issuer is not familiar."))
			err := tt.call(f.client())
			require.Error(t, err)
			assert.True(t, IsUnauthorized(err), "%v", err)
			assert.Equal(t, int32(2), f.v2Reqs.Load(), "one initial token and one forced refresh")
			assert.Equal(t, int32(2), f.apiReqs.Load(), "sent once, resent once, never retried further")
			assert.Contains(t, err.Error(), "Issuer is not familiar.")
		})
	}
}

func TestTokenConcurrent401sRefreshOnce(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer tok-1" {
			vendorError(http.StatusUnauthorized, "expired")(w, r)
			return
		}
		writeJSON(w, http.StatusOK, project("1", "a"))
	})
	c := f.client()
	_, err := c.tokens.TokenContext(context.Background()) // everyone starts with tok-1
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := c.GetProject(context.Background(), "1")
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(2), f.v2Reqs.Load(), "ten 401s with the same token cause one refresh")
}

func TestTokenV1FallbackWhenV2NotFound(t *testing.T) {
	rec := &authRecorder{}
	var calls atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			vendorError(http.StatusUnauthorized, "expired")(w, r) // forces a second token fetch
			return
		}
		rec.handler(w, r)
	})
	f.v2 = vendorError(http.StatusNotFound, "Not Found")
	f.v1 = func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, http.MethodPost, r.Method)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		b, _ := io.ReadAll(r.Body)
		var body map[string]string
		assert.NoError(t, json.Unmarshal(b, &body))
		assert.Equal(t, map[string]string{"grantType": "client_credentials", "clientID": testClientID, "clientSecret": testSecret}, body)
		writeJSON(w, http.StatusOK, TokenResponseV1{AccessToken: f.nextToken(), ExpiresIn: 3600})
	}
	obs := &countingObserver{}
	c := f.client(func(cfg *ClientConfig) { cfg.Observer = obs })

	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(1), f.v2Reqs.Load())
	assert.Equal(t, int32(1), f.v1Reqs.Load())

	_, err = c.GetProject(context.Background(), "1") // 401, refresh, resend
	require.NoError(t, err)
	assert.Equal(t, int32(1), f.v2Reqs.Load(), "v1 is remembered; v2 is not asked again")
	assert.Equal(t, int32(2), f.v1Reqs.Load())
	assert.Equal(t, []string{"Bearer tok-1", "Bearer tok-2"}, rec.tokens())
	assert.Equal(t, []string{TokenPathV2 + " err", TokenPathV1 + " ok", TokenPathV1 + " ok"}, obs.tokens)
}

func TestTokenV1ExpiryRespected(t *testing.T) {
	f := newFake(t, (&authRecorder{}).handler)
	f.v2 = vendorError(http.StatusNotFound, "Not Found")
	f.v1 = func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, TokenResponseV1{AccessToken: f.nextToken(), ExpiresIn: 100})
	}
	c := f.client()
	clk := newFakeClock()
	c.tokens.now = clk.Now
	_, err := c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	clk.Advance(91 * time.Second) // 10s early window
	_, err = c.GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(2), f.v1Reqs.Load())
}

func TestTokenErrorKinds(t *testing.T) {
	tests := []struct {
		name string
		v2   http.HandlerFunc
		kind Kind
	}{
		{"401 client authentication failed", vendorError(401, "client authentication failed"), KindUnauthorized},
		{"400 invalid_client", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 400, map[string]string{"error": "invalid_client"})
		}, KindUnauthorized},
		{"400 invalid_request", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 400, map[string]string{"error": "invalid_request"})
		}, KindInvalid},
		{"403", vendorError(403, "no"), KindForbidden},
		{"500", vendorError(500, "Something went wrong."), KindUnavailable},
		{"503", vendorError(503, "Please try again in few minutes."), KindUnavailable},
		{"429", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "5")
			writeJSON(w, 429, APIError{Code: 429, Message: "slow"})
		}, KindRateLimited},
		{"200 not a token", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>login</html>")
		}, KindUnknown},
		{"v2 and v1 both 404", vendorError(404, "Not Found"), KindNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, (&authRecorder{}).handler)
			f.v2 = tt.v2
			c := f.client(func(cfg *ClientConfig) { cfg.Retry.MaxAttempts = 1 })
			_, err := c.GetProject(context.Background(), "1")
			require.Error(t, err)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.kind, e.Kind, err.Error())
			assert.Equal(t, "get project: fetch token", e.Op)
			assert.Equal(t, int32(0), f.apiReqs.Load(), "no API request without a token")
			if tt.kind == KindRateLimited {
				assert.Equal(t, 5*time.Second, e.RetryAfter)
			}
		})
	}
}

func TestTokenFetchUnavailableRetriedForGet(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, (&authRecorder{}).handler)
	f.v2 = func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			vendorError(503, "busy")(w, r)
			return
		}
		f.defaultV2(w, r)
	}
	_, err := f.client().GetProject(context.Background(), "1")
	require.NoError(t, err)
	assert.Equal(t, int32(3), f.v2Reqs.Load())
}

func TestTokenSourceIsOAuth2TokenSource(t *testing.T) {
	f := newFake(t, (&authRecorder{}).handler)
	var ts oauth2.TokenSource = f.client().tokens
	tok, err := ts.Token()
	require.NoError(t, err)
	assert.Equal(t, "tok-1", tok.AccessToken)
	assert.True(t, tok.Valid())
	again, err := ts.Token()
	require.NoError(t, err)
	assert.Same(t, tok, again)
}
