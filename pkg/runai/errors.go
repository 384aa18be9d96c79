package runai

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies a failed Run:ai call so callers can branch on what happened
// without parsing messages: a binder treats Conflict as "someone else bound it,
// read again", admission treats Unavailable as "refuse and say retry later".
type Kind int

// The kinds of Run:ai failure, from the HTTP status (or the transport) of the answer.
const (
	KindUnknown      Kind = iota
	KindNotFound          // 404
	KindConflict          // 409: duplicate name, or namespace bound to another project
	KindUnauthorized      // 401 after one forced token refresh
	KindForbidden         // 403: the service account lacks a permission
	KindRateLimited       // 429, with RetryAfter when the server sent it
	KindUnavailable       // 5xx, connection refused, timeout: the control plane is down or slow
	KindInvalid           // 400/422: the request was refused as malformed
)

var kindNames = map[Kind]string{
	KindUnknown: "unknown", KindNotFound: "not found", KindConflict: "conflict",
	KindUnauthorized: "unauthorized", KindForbidden: "forbidden", KindRateLimited: "rate limited",
	KindUnavailable: "unavailable", KindInvalid: "invalid",
}

func (k Kind) String() string { return kindNames[k] }

// Error is every error the client returns for a call that reached (or tried to
// reach) Run:ai. It never carries the client secret or a token.
type Error struct {
	Kind       Kind
	Op         string        // operation, e.g. "create project"
	Status     int           // HTTP status, 0 when the request did not get an answer
	Message    string        // the server's message, if any
	RetryAfter time.Duration // from Retry-After on 429/503
	Err        error         // transport error, if any
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("run:ai %s: %s", e.Op, e.Kind)
	if e.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, or KindUnknown when err is not a Run:ai error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}

// IsNotFound, IsConflict, IsUnavailable and friends read a wrapped *Error.
func IsNotFound(err error) bool     { return KindOf(err) == KindNotFound }
func IsConflict(err error) bool     { return KindOf(err) == KindConflict }
func IsUnauthorized(err error) bool { return KindOf(err) == KindUnauthorized }
func IsForbidden(err error) bool    { return KindOf(err) == KindForbidden }
func IsRateLimited(err error) bool  { return KindOf(err) == KindRateLimited }
func IsInvalid(err error) bool      { return KindOf(err) == KindInvalid }

// IsUnavailable reports whether Run:ai could not answer usefully: down, slow,
// 5xx or still rate limiting after retries. Admission treats all of these as
// "Run:ai unreachable".
func IsUnavailable(err error) bool {
	k := KindOf(err)
	return k == KindUnavailable || k == KindRateLimited
}
