package runai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Token endpoints, newest first (API-NOTES §1).
const (
	TokenPathV2 = "/api/v2/token" // OAuth2 form body, snake_case answer
	TokenPathV1 = "/api/v1/token" // Run:ai JSON body, camelCase answer
)

const (
	// maxEarlyRefresh caps how long before expiry a token is replaced.
	maxEarlyRefresh = 60 * time.Second
	// tokenFetchTimeout bounds one token fetch. The fetch runs detached from
	// the caller that started it (other callers may be waiting for the same
	// fetch); every waiter still returns when its own context ends.
	tokenFetchTimeout = 30 * time.Second
	// recentTokens is how many issued access tokens the redactor remembers.
	recentTokens = 4
	opToken      = "fetch token"
)

// earlyWindow is how long before expiry a token of the given lifetime is
// refreshed: 10% of the lifetime, at most maxEarlyRefresh.
func earlyWindow(lifetime time.Duration) time.Duration {
	w := lifetime / 10
	if w > maxEarlyRefresh {
		w = maxEarlyRefresh
	}
	return w
}

// tokenSource fetches client-credentials tokens from Run:ai, caches them and
// replaces them before they expire. It tries POST /api/v2/token (standard
// OAuth2 through x/oauth2/clientcredentials) and, when that path answers 404,
// POST /api/v1/token (Run:ai JSON); whichever works is remembered and tried
// first next time. Concurrent callers share one fetch.
//
// A token without expires_in is kept until an API call answers 401 and the
// client invalidates it. When an early refresh fails but the cached token has
// not expired yet, the cached token keeps being used.
type tokenSource struct {
	baseURL      string // no trailing slash
	clientID     string
	clientSecret string
	hc           *http.Client
	log          logr.Logger
	obs          Observer
	red          *redactor
	now          func() time.Time // clock for the cache; tests move it

	mu        sync.Mutex
	tok       *oauth2.Token
	refreshAt time.Time // zero: no expiry known, keep until invalidated
	expiresAt time.Time
	inflight  *tokenFetch
	preferV1  bool // v2 answered 404 and v1 worked

	recentMu sync.Mutex
	recent   []string // last issued access tokens, for redaction
}

type tokenFetch struct {
	done chan struct{}
	tok  *oauth2.Token
	err  error
}

var _ oauth2.TokenSource = (*tokenSource)(nil)

// Token implements oauth2.TokenSource, bounded by tokenFetchTimeout.
func (s *tokenSource) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tokenFetchTimeout)
	defer cancel()
	return s.TokenContext(ctx)
}

// TokenContext returns a valid token, fetching one when none is cached or the
// cached one is inside its early-refresh window. It returns when ctx ends
// even if the fetch is still running. Errors are *Error without secrets.
func (s *tokenSource) TokenContext(ctx context.Context) (*oauth2.Token, error) {
	s.mu.Lock()
	if s.tok != nil && (s.refreshAt.IsZero() || s.now().Before(s.refreshAt)) {
		t := s.tok
		s.mu.Unlock()
		return t, nil
	}
	f := s.inflight
	if f == nil {
		f = &tokenFetch{done: make(chan struct{})}
		s.inflight = f
		go s.fetch(context.WithoutCancel(ctx), f)
	}
	s.mu.Unlock()

	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return nil, &Error{Kind: KindUnavailable, Op: opToken, Message: "gave up waiting for a token", Err: ctx.Err()}
	}
}

// invalidate drops the cached token if it is still access, so that the next
// TokenContext fetches a new one. Comparing with the token the failed call
// used makes concurrent 401s cause one refresh, not one each.
func (s *tokenSource) invalidate(access string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil && s.tok.AccessToken == access {
		s.tok = nil
		s.refreshAt, s.expiresAt = time.Time{}, time.Time{}
	}
}

func (s *tokenSource) fetch(ctx context.Context, f *tokenFetch) {
	ctx, cancel := context.WithTimeout(ctx, tokenFetchTimeout)
	defer cancel()
	tok, lifetime, err := s.retrieve(ctx)

	s.mu.Lock()
	now := s.now()
	if err == nil {
		s.tok = tok
		if lifetime > 0 {
			s.expiresAt = now.Add(lifetime)
			s.refreshAt = now.Add(lifetime - earlyWindow(lifetime))
		} else {
			s.expiresAt, s.refreshAt = time.Time{}, time.Time{}
		}
		f.tok = tok
		s.rememberToken(tok.AccessToken)
		s.log.V(1).Info("run:ai token refreshed", "lifetime", lifetime.String())
	} else if s.tok != nil && now.Before(s.expiresAt) {
		// The early refresh failed but the cached token is still good.
		f.tok = s.tok
		s.log.V(1).Info("run:ai token refresh failed; using the cached token until it expires",
			"error", err.Error(), "expiresIn", s.expiresAt.Sub(now).String())
	} else {
		f.err = err
		s.log.V(1).Info("run:ai token fetch failed", "error", err.Error())
	}
	s.inflight = nil
	s.mu.Unlock()
	close(f.done)
}

// retrieve tries the remembered endpoint first and the other one when the
// first answers 404.
func (s *tokenSource) retrieve(ctx context.Context) (*oauth2.Token, time.Duration, error) {
	s.mu.Lock()
	preferV1 := s.preferV1
	s.mu.Unlock()

	order := []string{TokenPathV2, TokenPathV1}
	if preferV1 {
		order = []string{TokenPathV1, TokenPathV2}
	}
	var lastErr error
	for i, path := range order {
		var (
			tok *oauth2.Token
			err error
		)
		if path == TokenPathV2 {
			tok, err = s.retrieveV2(ctx)
		} else {
			tok, err = s.retrieveV1(ctx)
		}
		if s.obs != nil {
			s.obs.ObserveTokenRefresh(path, err)
		}
		if err == nil {
			s.mu.Lock()
			s.preferV1 = path == TokenPathV1
			s.mu.Unlock()
			return tok, tokenLifetime(tok), nil
		}
		lastErr = err
		if !IsNotFound(err) || i == len(order)-1 {
			break
		}
		s.log.V(1).Info("run:ai token endpoint not found, trying the other one", "path", path, "next", order[i+1])
	}
	return nil, 0, lastErr
}

// tokenLifetime is the lifetime the server granted, 0 when it sent none.
func tokenLifetime(t *oauth2.Token) time.Duration {
	if t.ExpiresIn > 0 {
		return time.Duration(t.ExpiresIn) * time.Second
	}
	if !t.Expiry.IsZero() {
		if d := time.Until(t.Expiry); d > 0 {
			return d
		}
		return time.Nanosecond // already expired: use once, refresh next time
	}
	return 0
}

func (s *tokenSource) retrieveV2(ctx context.Context) (*oauth2.Token, error) {
	cfg := clientcredentials.Config{
		ClientID:     s.clientID,
		ClientSecret: s.clientSecret,
		TokenURL:     s.baseURL + TokenPathV2,
		AuthStyle:    oauth2.AuthStyleInParams,
	}
	tok, err := cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, s.hc))
	if err != nil {
		return nil, s.v2Error(ctx, err)
	}
	return tok, nil
}

// v2Error turns an x/oauth2 error into *Error. RetrieveError carries the raw
// response body (which may echo the request); it is never kept in the chain.
func (s *tokenSource) v2Error(ctx context.Context, err error) *Error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		var header http.Header
		if re.Response != nil {
			status = re.Response.StatusCode
			header = re.Response.Header
		}
		e := statusError(s.red, opToken, status, header, re.Body)
		if re.ErrorCode != "" {
			msg := re.ErrorCode
			if re.ErrorDescription != "" {
				msg += ": " + re.ErrorDescription
			}
			e.Message = truncate(oneLine(s.red.clean(msg)), maxMessage)
			switch re.ErrorCode {
			case "invalid_client", "unauthorized_client", "invalid_grant", "access_denied":
				e.Kind = KindUnauthorized
			default:
				if status >= 200 && status < 300 {
					e.Kind = KindInvalid
				}
			}
		}
		return e
	}
	return transportError(s.red, opToken, ctx, err)
}

func (s *tokenSource) retrieveV1(ctx context.Context) (*oauth2.Token, error) {
	body, err := json.Marshal(TokenRequestV1{GrantType: "client_credentials", ClientID: s.clientID, ClientSecret: s.clientSecret})
	if err != nil {
		return nil, &Error{Kind: KindUnknown, Op: opToken, Message: "encode token request"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.baseURL+TokenPathV1, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Kind: KindInvalid, Op: opToken, Err: sanitize(s.red, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, transportError(s.red, opToken, ctx, err)
	}
	b, tooLarge, rerr := readBody(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, statusError(s.red, opToken, resp.StatusCode, resp.Header, b)
	}
	if rerr != nil {
		return nil, transportError(s.red, opToken, ctx, rerr)
	}
	if tooLarge {
		return nil, tooLargeError(opToken, resp.StatusCode)
	}
	var tr TokenResponseV1
	if err := json.Unmarshal(b, &tr); err != nil {
		return nil, &Error{Kind: KindUnknown, Op: opToken, Status: resp.StatusCode, Message: "token answer is not JSON", Err: sanitize(s.red, err)}
	}
	if tr.AccessToken == "" {
		return nil, &Error{Kind: KindUnknown, Op: opToken, Status: resp.StatusCode, Message: "token answer has no accessToken"}
	}
	tok := &oauth2.Token{AccessToken: tr.AccessToken, TokenType: "Bearer", ExpiresIn: tr.ExpiresIn}
	if tr.ExpiresIn > 0 {
		tok.Expiry = time.Now().Add(time.Duration(tr.ExpiresIn) * time.Second)
	}
	return tok, nil
}

func (s *tokenSource) rememberToken(t string) {
	if t == "" {
		return
	}
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	s.recent = append(s.recent, t)
	if len(s.recent) > recentTokens {
		s.recent = s.recent[len(s.recent)-recentTokens:]
	}
}

func (s *tokenSource) knownTokens() []string {
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	return append([]string(nil), s.recent...)
}

// isTimeout reports whether err is a network or context timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// redactor removes the client secret and the access tokens from text that
// may reach an error string or a log line.
type redactor struct {
	secrets []string // the secret as sent: raw, form-encoded, JSON-escaped
	tokens  func() []string
}

const redacted = "[REDACTED]"

func newRedactor(secret string, tokens func() []string) *redactor {
	r := &redactor{tokens: tokens}
	if secret != "" {
		variants := map[string]bool{secret: true}
		variants[formEscape(secret)] = true
		if j, err := json.Marshal(secret); err == nil {
			variants[strings.Trim(string(j), `"`)] = true
		}
		for v := range variants {
			if v != "" {
				r.secrets = append(r.secrets, v)
			}
		}
	}
	return r
}

func (r *redactor) clean(s string) string {
	if r == nil || s == "" {
		return s
	}
	for _, v := range r.secrets {
		s = strings.ReplaceAll(s, v, redacted)
	}
	if r.tokens != nil {
		for _, t := range r.tokens() {
			if t != "" {
				s = strings.ReplaceAll(s, t, redacted)
			}
		}
	}
	return bearerRE.ReplaceAllString(s, "${1}"+redacted)
}

// sanitizedError keeps an error's chain (errors.Is(err, context.DeadlineExceeded)
// still works) but shows a redacted message.
type sanitizedError struct {
	msg string
	err error
}

func (e *sanitizedError) Error() string { return e.msg }
func (e *sanitizedError) Unwrap() error { return e.err }

func sanitize(r *redactor, err error) error {
	if err == nil {
		return nil
	}
	return &sanitizedError{msg: r.clean(err.Error()), err: err}
}
