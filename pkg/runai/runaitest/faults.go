package runaitest

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
)

// Fault makes matching requests fail. A request matches when Method (""
// any), PathPrefix ("" any vendor path) and BodyContains ("" any) all match;
// then, with probability Rate (0 is taken as 1), the fault fires, at most
// Times times (0 = no limit). Admin paths (/_sim/) never match.
type Fault struct {
	Method     string        `json:"method,omitempty"`
	PathPrefix string        `json:"pathPrefix,omitempty"`
	Status     int           `json:"status,omitempty"` // e.g. 401, 403, 409, 429, 500, 503; 0 = 500 (or, with DropResponse, a cut connection)
	Rate       float64       `json:"rate,omitempty"`
	Times      int           `json:"times,omitempty"`
	RetryAfter time.Duration `json:"-"` // sent as Retry-After (whole seconds, rounded up)
	// DropResponse performs the operation first and then loses the answer:
	// the client then sees Status (e.g. 500: "create succeeded but the
	// response was lost") or, when Status is 0, a connection closed without
	// any answer. It is how tests reach the "did my create happen?" paths.
	DropResponse bool `json:"dropResponse,omitempty"`
	// BodyContains restricts the fault to requests whose body contains it,
	// e.g. `"parentId":"1003"` to fail project creation in one department.
	BodyContains string `json:"bodyContains,omitempty"`
}

type faultRule struct {
	Fault
	fired int
}

// Call is one request the simulator received.
type Call struct {
	Method   string        `json:"method"`
	Path     string        `json:"path"`
	RawQuery string        `json:"rawQuery,omitempty"`
	Status   int           `json:"status"` // 0 when the connection was cut without an answer
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"duration"`
	Fault    bool          `json:"fault,omitempty"` // answered by an injected fault
}

// AddFault installs a fault rule; rules are tried in the order added.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &faultRule{Fault: f})
}

// Faults lists the installed rules and how often each has fired.
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, 0, len(s.faults))
	for _, r := range s.faults {
		out = append(out, r.Fault)
	}
	return out
}

// ClearFaults removes every fault rule (latency and down are separate).
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// SetLatency delays every vendor request by d before it is handled. A
// client that gives up (request context done) gets no answer.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// RevokeTokens invalidates every token issued so far: the next call with one
// answers 401, as after a rotated secret or a revoked service account.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]issuedToken{}
}

// Calls returns the recorded requests, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CountCalls counts recorded requests with that method ("" any) whose path
// starts with pathPrefix.
func (s *Server) CountCalls(method, pathPrefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if (method == "" || c.Method == method) && strings.HasPrefix(c.Path, pathPrefix) {
			n++
		}
	}
	return n
}

// CountWrites counts POST, PUT, PATCH and DELETE requests other than token
// requests: the calls that change Run:ai state. Tests use it to prove that a
// code path (e.g. a pod in a bound namespace, a dry run) made none.
func (s *Server) CountWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if isWrite(c.Method) && !isTokenPath(c.Path) {
			n++
		}
	}
	return n
}

// ResetCalls forgets the recorded requests.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func isTokenPath(path string) bool { return path == "/api/v1/token" || path == "/api/v2/token" }

// nextRandLocked is a splitmix64 step: reproducible runs for a given
// sequence of requests, without a global random source.
func (s *Server) nextRandLocked() float64 {
	s.rng += 0x9E3779B97F4A7C15
	z := s.rng
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / float64(1<<53)
}

// matchFaultLocked returns the fault that fires for this request, if any.
func (s *Server) matchFaultLocked(method, path string, body []byte) *Fault {
	for i, r := range s.faults {
		if r.Method != "" && !strings.EqualFold(r.Method, method) {
			continue
		}
		if !strings.HasPrefix(path, r.PathPrefix) {
			continue
		}
		if r.BodyContains != "" && !bytes.Contains(body, []byte(r.BodyContains)) {
			continue
		}
		if r.Rate > 0 && r.Rate < 1 && s.nextRandLocked() >= r.Rate {
			continue
		}
		r.fired++
		f := r.Fault
		if r.Times > 0 && r.fired >= r.Times {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
		}
		return &f
	}
	return nil
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// buildHandler chains: admin paths straight through; vendor paths get
// recording, latency, down, faults, authentication, then the vendor mux.
func (s *Server) buildHandler() http.Handler {
	vendor := s.vendorMux()
	admin := s.adminMux()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_sim/") {
			admin.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		call := Call{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Time: s.Now()}
		faulted := false
		defer func() {
			call.Status, call.Duration, call.Fault = sw.status, time.Since(start), faulted
			s.mu.Lock()
			s.calls = append(s.calls, call)
			s.mu.Unlock()
			s.logRequest(r.Method, r.URL.RequestURI(), sw.status, call.Duration)
		}()

		if s.handlerDown() {
			panic(http.ErrAbortHandler) // the connection is cut, no answer
		}
		s.mu.Lock()
		latency := s.latency
		s.mu.Unlock()
		if !sleepCtx(r.Context(), latency) {
			return // the client gave up
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeError(sw, http.StatusBadRequest, "read body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		f := s.matchFaultLocked(r.Method, r.URL.Path, body)
		s.mu.Unlock()
		if f == nil {
			vendor.ServeHTTP(sw, r)
			return
		}
		faulted = true
		if f.DropResponse {
			vendor.ServeHTTP(httptest.NewRecorder(), r) // the operation happens...
			if f.Status == 0 {
				panic(http.ErrAbortHandler) // ...and the answer is lost with the connection
			}
		}
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		if f.RetryAfter > 0 {
			sw.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(f.RetryAfter.Seconds()))))
		}
		writeError(sw, status, fmt.Sprintf("injected fault: %s", faultMessage(status)))
	})
}

// faultMessage is the vendor's example message for each status.
func faultMessage(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "Required parameter is missing"
	case http.StatusUnauthorized:
		return "Issuer is not familiar."
	case http.StatusForbidden:
		return "You do not have sufficient permissions."
	case http.StatusNotFound:
		return "Resource id not found."
	case http.StatusConflict:
		return "Resource with this name already exists"
	case http.StatusTooManyRequests:
		return "Too many requests"
	case http.StatusServiceUnavailable:
		return "Please try again in few minutes."
	default:
		return "Something went wrong."
	}
}
