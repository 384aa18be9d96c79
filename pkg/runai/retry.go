package runai

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy bounds the automatic retries of idempotent calls (GET, DELETE).
// Retries happen only on KindUnavailable and KindRateLimited; a POST is never
// retried. The zero value means the defaults below. Delays use exponential
// backoff with full jitter: attempt n sleeps a uniformly random duration in
// [0, min(MaxDelay, BaseDelay*2^(n-1))]. A Retry-After sent by the server
// replaces the computed delay. No sleep ever runs past the context's
// deadline: when the next delay would, the last error is returned at once.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts including the first one.
	// 0 means 3; 1 disables retries.
	MaxAttempts int
	// BaseDelay is the first backoff ceiling. 0 means 100ms.
	BaseDelay time.Duration
	// MaxDelay caps each backoff ceiling. 0 means 2s.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; a longer
	// one returns the KindRateLimited error at once, with RetryAfter set, so
	// the caller can decide. 0 means 10s.
	MaxRetryAfter time.Duration
}

// Defaults of RetryPolicy.
const (
	DefaultMaxAttempts   = 3
	DefaultBaseDelay     = 100 * time.Millisecond
	DefaultMaxDelay      = 2 * time.Second
	DefaultMaxRetryAfter = 10 * time.Second
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.MaxDelay < p.BaseDelay {
		p.MaxDelay = p.BaseDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	return p
}

// backoff returns the full-jitter delay before retry number attempt (1-based:
// attempt 1 is the delay between the first and the second try).
func (p RetryPolicy) backoff(attempt int) time.Duration {
	ceiling := p.BaseDelay
	for i := 1; i < attempt && ceiling < p.MaxDelay; i++ {
		ceiling *= 2
	}
	if ceiling > p.MaxDelay {
		ceiling = p.MaxDelay
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// retryable reports whether a failed idempotent call may be tried again.
func retryable(err error) bool {
	switch KindOf(err) {
	case KindUnavailable, KindRateLimited:
		return true
	}
	return false
}

// idempotent reports whether method may be retried automatically.
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete:
		return true
	}
	return false
}

// maxRetryAfter caps what a server may ask us to wait, whichever form it
// uses (a date decades ahead is as absurd as that many seconds).
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After header: delta seconds or an HTTP date,
// capped at a day. It returns 0 when the header is absent, malformed or in
// the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(maxRetryAfter/time.Second) {
			secs = int64(maxRetryAfter / time.Second)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// sleepCtx sleeps d or until ctx ends, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fitsDeadline reports whether sleeping d still leaves time before ctx's deadline.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	if !ok {
		return true
	}
	return time.Until(deadline) > d
}
