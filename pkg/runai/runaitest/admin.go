package runaitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The admin API under /_sim/ drives a running simulator (cmd/runai-sim) from
// shell scripts and end-to-end tests in other processes. It is never
// authenticated, never recorded and never subject to faults or latency.
//
//	GET    /_sim/state                          cluster, node pools, departments, projects
//	GET    /_sim/faults                         installed fault rules
//	POST   /_sim/faults                         add a Fault (JSON; retryAfter as "2s")
//	DELETE /_sim/faults                         remove every fault rule
//	POST   /_sim/latency?d=200ms                delay every vendor request (0 to stop)
//	POST   /_sim/down?for=5s                    refuse connections for a while, then listen again on the same port
//	GET    /_sim/calls                          recorded requests, plus writes count
//	DELETE /_sim/calls                          forget recorded requests
//	POST   /_sim/allocation                     {"project","nodePool"?,"allocated","allocatedNonPreemptible"}
//	POST   /_sim/free-gpus                      {"nodePool","free"}; free < 0 unpins
//	POST   /_sim/departments                    {"name"}
//	POST   /_sim/departments/{name}/rename      {"name"}
//	POST   /_sim/projects                       a ProjectSeed: pre-bound project (adoption)
//	DELETE /_sim/projects/{name}                delete now, no Deleting phase
//	POST   /_sim/projects/{name}/move           {"department"}
//	POST   /_sim/projects/{name}/phase          {"phase"} ("" unpins)
//	POST   /_sim/revoke-tokens                  every issued token answers 401
//	POST   /_sim/advance?by=1m                  move the simulated clock
//	POST   /_sim/delays                         {"createDelay":"2s","deleteDelay":"2s"}
func (s *Server) adminMux() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter) { writeJSON(w, http.StatusOK, map[string]string{"status": "ok"}) }
	bad := func(w http.ResponseWriter, err error) { writeError(w, http.StatusBadRequest, err.Error()) }

	mux.HandleFunc("GET /_sim/state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"cluster": s.Cluster(), "nodePools": s.NodePools(), "departments": s.Departments(),
			"projects": s.Projects(), "down": s.IsDown(), "now": s.Now(),
		})
	})
	mux.HandleFunc("GET /_sim/faults", func(w http.ResponseWriter, r *http.Request) {
		out := []faultJSON{}
		for _, f := range s.Faults() {
			out = append(out, toFaultJSON(f))
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /_sim/faults", func(w http.ResponseWriter, r *http.Request) {
		var fj faultJSON
		if err := decodeStrict(r, &fj); err != nil {
			bad(w, err)
			return
		}
		f, err := fj.fault()
		if err != nil {
			bad(w, err)
			return
		}
		s.AddFault(f)
		writeJSON(w, http.StatusCreated, toFaultJSON(f))
	})
	mux.HandleFunc("DELETE /_sim/faults", func(w http.ResponseWriter, r *http.Request) { s.ClearFaults(); ok(w) })
	mux.HandleFunc("POST /_sim/latency", func(w http.ResponseWriter, r *http.Request) {
		d, err := durationParam(r, "d")
		if err != nil {
			bad(w, err)
			return
		}
		s.SetLatency(d)
		ok(w)
	})
	mux.HandleFunc("POST /_sim/down", func(w http.ResponseWriter, r *http.Request) {
		// "for" is required: the admin API goes down with the port, so an
		// open-ended outage could not be ended over HTTP.
		d, err := durationParam(r, "for")
		if err != nil || d <= 0 {
			bad(w, fmt.Errorf("down needs ?for=<duration> (e.g. 5s): the admin API shares the port and goes down too"))
			return
		}
		// Answer first, then go down: closing the listener cuts this connection.
		ok(w)
		if f, isFlusher := w.(http.Flusher); isFlusher {
			f.Flush()
		}
		go func() {
			if err := s.DownFor(d); err != nil {
				s.logRequest("POST", "/_sim/down: "+err.Error(), 0, 0)
			}
		}()
	})
	mux.HandleFunc("GET /_sim/calls", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"calls": s.Calls(), "writes": s.CountWrites()})
	})
	mux.HandleFunc("DELETE /_sim/calls", func(w http.ResponseWriter, r *http.Request) { s.ResetCalls(); ok(w) })
	mux.HandleFunc("POST /_sim/allocation", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Project                 string  `json:"project"`
			NodePool                string  `json:"nodePool"`
			Allocated               float64 `json:"allocated"`
			AllocatedNonPreemptible float64 `json:"allocatedNonPreemptible"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if req.NodePool == "" {
			req.NodePool = s.DefaultNodePool().Name
		}
		if err := s.SetNodePoolAllocation(req.Project, req.NodePool, req.Allocated, req.AllocatedNonPreemptible); err != nil {
			bad(w, err)
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /_sim/free-gpus", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			NodePool string  `json:"nodePool"`
			Free     float64 `json:"free"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if err := s.SetFreeGPUs(req.NodePool, req.Free); err != nil {
			bad(w, err)
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /_sim/departments", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name string `json:"name"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if !validName(req.Name) {
			bad(w, fmt.Errorf("invalid department name %q", req.Name))
			return
		}
		writeJSON(w, http.StatusCreated, s.AddDepartment(req.Name))
	})
	mux.HandleFunc("POST /_sim/departments/{name}/rename", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name string `json:"name"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if err := s.RenameDepartment(r.PathValue("name"), req.Name); err != nil {
			bad(w, err)
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /_sim/projects", func(w http.ResponseWriter, r *http.Request) {
		var ps ProjectSeed
		if err := decodeStrict(r, &ps); err != nil {
			bad(w, err)
			return
		}
		if err := s.checkProjectSeed(ps); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusCreated, s.AddProject(ps))
	})
	mux.HandleFunc("DELETE /_sim/projects/{name}", func(w http.ResponseWriter, r *http.Request) {
		if !s.DeleteProjectNow(r.PathValue("name")) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no project %q", r.PathValue("name")))
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /_sim/projects/{name}/move", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Department string `json:"department"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if err := s.MoveProject(r.PathValue("name"), req.Department); err != nil {
			bad(w, err)
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /_sim/projects/{name}/phase", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Phase string `json:"phase"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if err := s.SetProjectPhase(r.PathValue("name"), req.Phase); err != nil {
			bad(w, err)
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /_sim/revoke-tokens", func(w http.ResponseWriter, r *http.Request) { s.RevokeTokens(); ok(w) })
	mux.HandleFunc("POST /_sim/advance", func(w http.ResponseWriter, r *http.Request) {
		d, err := durationParam(r, "by")
		if err != nil || d < 0 {
			bad(w, fmt.Errorf("advance needs ?by=<duration> >= 0"))
			return
		}
		s.Advance(d)
		ok(w)
	})
	mux.HandleFunc("POST /_sim/delays", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			CreateDelay *jsonDuration `json:"createDelay"`
			DeleteDelay *jsonDuration `json:"deleteDelay"`
		}
		if err := decodeStrict(r, &req); err != nil {
			bad(w, err)
			return
		}
		if req.CreateDelay != nil {
			s.SetCreateDelay(time.Duration(*req.CreateDelay))
		}
		if req.DeleteDelay != nil {
			s.SetDeleteDelay(time.Duration(*req.DeleteDelay))
		}
		ok(w)
	})
	mux.HandleFunc("/_sim/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s: no such admin endpoint", r.Method, r.URL.Path))
	})
	return mux
}

// checkProjectSeed refuses an admin-made project that would break the
// invariants the vendor keeps (unique name, one project per namespace).
func (s *Server) checkProjectSeed(ps ProjectSeed) error {
	if !validName(ps.Name) {
		return fmt.Errorf("invalid project name %q", ps.Name)
	}
	ns := ps.Namespace
	if ns == "" {
		ns = "runai-" + ps.Name
	}
	if !validNamespace(ns) {
		return fmt.Errorf("invalid namespace %q", ns)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	for _, p := range s.projects {
		if p.name == ps.Name || p.boundNamespace() == ns {
			return fmt.Errorf("project %q or namespace %q already exists", ps.Name, ns)
		}
	}
	return nil
}

// faultJSON is Fault on the wire, with retryAfter as a duration string.
type faultJSON struct {
	Method       string        `json:"method,omitempty"`
	PathPrefix   string        `json:"pathPrefix,omitempty"`
	Status       int           `json:"status,omitempty"`
	Rate         float64       `json:"rate,omitempty"`
	Times        int           `json:"times,omitempty"`
	RetryAfter   *jsonDuration `json:"retryAfter,omitempty"`
	DropResponse bool          `json:"dropResponse,omitempty"`
	BodyContains string        `json:"bodyContains,omitempty"`
}

func toFaultJSON(f Fault) faultJSON {
	out := faultJSON{Method: f.Method, PathPrefix: f.PathPrefix, Status: f.Status, Rate: f.Rate, Times: f.Times,
		DropResponse: f.DropResponse, BodyContains: f.BodyContains}
	if f.RetryAfter > 0 {
		d := jsonDuration(f.RetryAfter)
		out.RetryAfter = &d
	}
	return out
}

func (fj faultJSON) fault() (Fault, error) {
	f := Fault{Method: fj.Method, PathPrefix: fj.PathPrefix, Status: fj.Status, Rate: fj.Rate, Times: fj.Times,
		DropResponse: fj.DropResponse, BodyContains: fj.BodyContains}
	if fj.RetryAfter != nil {
		f.RetryAfter = time.Duration(*fj.RetryAfter)
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return Fault{}, fmt.Errorf("fault status %d: want 400-599", f.Status)
	}
	if f.Rate < 0 || f.Rate > 1 || f.Times < 0 {
		return Fault{}, fmt.Errorf("fault rate %g / times %d: want rate in [0,1] and times >= 0", f.Rate, f.Times)
	}
	return f, nil
}

func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s body: %w", r.URL.Path, err)
	}
	return nil
}

func durationParam(r *http.Request, name string) (time.Duration, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, fmt.Errorf("missing ?%s=<duration>", name)
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("?%s=%q: want a duration like 2s", name, v)
	}
	return time.Duration(secs * float64(time.Second)), nil
}
