// Package runaitest is an in-memory NVIDIA Run:ai control plane for tests
// and local runs (cmd/runai-sim). It serves the vendor's paths and JSON
// shapes for what the webhook uses (tokens, clusters, node pools,
// departments, projects, node telemetry) with the vendor's semantics: async
// project creation (Creating -> Ready, status.namespace set when bound),
// async deletion (202 -> Deleting -> 404), 409 on a duplicate name or a
// namespace held by another project, next-paging, bearer tokens that expire
// or are revoked. Faults (down, latency, error statuses, lost responses) can
// be injected from Go or over HTTP under /_sim/, and every request is recorded
// so tests can assert how many calls, and how many writes, a code path made.
//
// The contract tests in pkg/runai validate the simulator's answers against
// NVIDIA's OpenAPI document, which keeps it honest.
package runaitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Server is a simulated Run:ai control plane. All methods are safe for
// concurrent use.
type Server struct {
	mu        sync.Mutex
	seed      Seed
	started   time.Time
	skew      time.Duration // Advance
	lastID    int
	pools     []*nodePool
	depts     map[string]*department
	projects  map[string]*project
	tokens    map[string]issuedToken
	lastToken int

	// faults and recording (faults.go)
	faults  []*faultRule
	latency time.Duration
	calls   []Call
	rng     uint64 // deterministic PRNG state for Fault.Rate

	handler http.Handler

	// listener lifecycle (Start / SetDown); lnMu orders up/down transitions.
	lnMu      sync.Mutex
	addr      string // the bound 127.0.0.1:port, kept across down/up
	srv       *http.Server
	down      bool
	downTimer *time.Timer
	closed    bool
	logf      func(format string, args ...any)
}

type issuedToken struct {
	clientID string
	expires  time.Time
}

// New builds a control plane from seed (defaults applied). It panics when
// the seed is inconsistent (Seed.Validate), which in a test is a programming
// error; LoadSeed reports the same problems as errors for files.
func New(seed Seed) *Server {
	seed = seed.WithDefaults()
	if err := seed.Validate(); err != nil {
		panic(fmt.Sprintf("runaitest.New: %v", err))
	}
	s := &Server{
		seed:     seed,
		lastID:   1000,
		depts:    map[string]*department{},
		projects: map[string]*project{},
		tokens:   map[string]issuedToken{},
		rng:      0x9E3779B97F4A7C15,
	}
	s.started = s.nowLocked()
	for _, ps := range seed.NodePools {
		np := &nodePool{id: s.nextIDLocked(), name: ps.Name, isDefault: ps.IsDefault, total: ps.TotalGPUs, createdAt: s.started}
		if ps.FreeGPUs != nil {
			np.free = f64(*ps.FreeGPUs)
		}
		s.pools = append(s.pools, np)
	}
	for _, ds := range seed.Departments {
		s.addDepartmentLocked(ds)
	}
	for _, ps := range seed.Projects {
		s.addProjectLocked(ps)
	}
	s.handler = s.buildHandler()
	return s
}

// Run starts a simulator on 127.0.0.1 with a free port and closes it when
// the test ends.
func Run(t testing.TB, seed Seed) *Server {
	t.Helper()
	s := New(seed)
	if err := s.Start(""); err != nil {
		t.Fatalf("start Run:ai simulator: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Handler serves the vendor API and /_sim/ for composition into another
// server (e.g. httptest.NewServer or a validating middleware). SetDown
// without Start makes it abort every request, which a client sees as a
// dropped connection.
func (s *Server) Handler() http.Handler { return s.handler }

// SetLogf makes the server log one line per request (cmd/runai-sim).
func (s *Server) SetLogf(logf func(format string, args ...any)) {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	s.logf = logf
}

// Start listens on addr ("" = 127.0.0.1:0) and serves in the background.
// Only loopback addresses are accepted: the simulator accepts any caller that
// knows the default credentials and must never be reachable from a network.
func (s *Server) Start(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("listen address %q: only loopback addresses (127.0.0.1, ::1, localhost) are allowed", addr)
		}
	}
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.srv != nil || s.addr != "" {
		return errors.New("runaitest: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	s.addr = ln.Addr().String()
	s.serveLocked(ln)
	return nil
}

func (s *Server) serveLocked(ln net.Listener) {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.srv = srv
	go func() { _ = srv.Serve(ln) }()
}

// URL is the base URL clients use (http://127.0.0.1:port); "" before Start.
func (s *Server) URL() string {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.addr == "" {
		return ""
	}
	return "http://" + s.addr
}

// Addr is the bound host:port; it stays the same across SetDown cycles.
func (s *Server) Addr() string {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.addr
}

// Close stops serving for good.
func (s *Server) Close() {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	s.closed = true
	if s.downTimer != nil {
		s.downTimer.Stop()
	}
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
}

// Shutdown stops accepting connections and waits for requests in flight
// (or ctx), for a clean exit of cmd/runai-sim.
func (s *Server) Shutdown(ctx context.Context) error {
	s.lnMu.Lock()
	s.closed = true
	if s.downTimer != nil {
		s.downTimer.Stop()
	}
	srv := s.srv
	s.srv = nil
	s.lnMu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down Run:ai simulator: %w", err)
	}
	return nil
}

// SetDown(true) makes the control plane unreachable: the listener is closed
// and open connections are cut, so clients get "connection refused" (not an
// HTTP error). SetDown(false) listens again on the same port, because
// clients keep the URL they were configured with. Without Start, the handler
// aborts each request instead.
func (s *Server) SetDown(down bool) error {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.downTimer != nil {
		s.downTimer.Stop()
		s.downTimer = nil
	}
	return s.setDownLocked(down)
}

// DownFor takes the control plane down now and brings it back after d.
func (s *Server) DownFor(d time.Duration) error {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.downTimer != nil {
		s.downTimer.Stop()
	}
	if err := s.setDownLocked(true); err != nil {
		return err
	}
	s.downTimer = time.AfterFunc(d, func() {
		s.lnMu.Lock()
		defer s.lnMu.Unlock()
		s.downTimer = nil
		if err := s.setDownLocked(false); err != nil && s.logf != nil {
			s.logf("runai-sim: coming back up: %v", err)
		}
	})
	return nil
}

// IsDown reports whether SetDown(true) is in force.
func (s *Server) IsDown() bool {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.down
}

func (s *Server) setDownLocked(down bool) error {
	if s.closed {
		return errors.New("runaitest: closed")
	}
	if down == s.down {
		return nil
	}
	s.down = down
	if s.addr == "" { // not started: the handler aborts requests while down
		return nil
	}
	if down {
		if s.srv != nil {
			_ = s.srv.Close() // closes the listener and every connection
			s.srv = nil
		}
		return nil
	}
	// Re-listen on the same port. The old socket may linger for a moment
	// after Close on some systems, so retry briefly.
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.down = true
		return fmt.Errorf("listen again on %s: %w", s.addr, err)
	}
	s.serveLocked(ln)
	return nil
}

// handlerDown reports whether the composed handler must refuse requests
// (SetDown without a listener of our own).
func (s *Server) handlerDown() bool {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.down
}

func (s *Server) logRequest(method, path string, status int, d time.Duration) {
	s.lnMu.Lock()
	logf := s.logf
	s.lnMu.Unlock()
	if logf != nil {
		logf("%s %s -> %d (%s)", method, path, status, d.Round(time.Microsecond))
	}
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
