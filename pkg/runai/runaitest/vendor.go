package runaitest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// vendorMux routes the vendor paths. Anything else answers a vendor-style
// 404, so a client calling a wrong path fails the way it would on Run:ai.
func (s *Server) vendorMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v2/token", s.tokenV2)
	mux.HandleFunc("POST /api/v1/token", s.tokenV1)
	authed := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.requireToken(h)) }
	authed("GET /api/v1/clusters", s.listClusters)
	authed("GET /api/v1/clusters/{clusterUuid}", s.getCluster)
	authed("GET /api/v1/node-pools", s.listNodePools)
	authed("GET /api/v1/org-unit/departments", s.listDepartments)
	authed("GET /api/v1/org-unit/departments/{departmentId}", s.getDepartment)
	authed("GET /api/v1/org-unit/projects", s.listProjects)
	authed("POST /api/v1/org-unit/projects", s.createProject)
	authed("GET /api/v1/org-unit/projects/{projectId}", s.getProject)
	authed("DELETE /api/v1/org-unit/projects/{projectId}", s.deleteProject)
	authed("GET /api/v1/nodes/telemetry", s.nodesTelemetry)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not served by the Run:ai simulator", r.Method, r.URL.Path))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError answers the vendor's Error body {"code","message"}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, runai.APIError{Code: status, Message: msg})
}

// oauthError answers the OAuth2Error body the v2 token endpoint declares.
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// ---- tokens ----------------------------------------------------------------

func (s *Server) issueTokenLocked(clientID string) (string, int64) {
	now := s.nowLocked()
	s.lastToken++
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%d", clientID, s.lastToken, now.UnixNano())))
	tok := fmt.Sprintf("sim.%d.%s", s.lastToken, hex.EncodeToString(sum[:12]))
	s.tokens[tok] = issuedToken{clientID: clientID, expires: now.Add(s.seed.TokenTTL)}
	return tok, int64(math.Ceil(s.seed.TokenTTL.Seconds()))
}

// tokenV2 is the OAuth2 endpoint: form-encoded client credentials, in the
// body or (RFC 6749 §2.3.1) as HTTP Basic.
func (s *Server) tokenV2(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	enabled := s.seed.V2TokenEnabled == nil || *s.seed.V2TokenEnabled
	s.mu.Unlock()
	if !enabled {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "form body: "+err.Error())
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "client_credentials" {
		if gt == "" {
			oauthError(w, http.StatusBadRequest, "invalid_request", "grant_type is required")
		} else {
			oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "the simulator supports client_credentials only")
		}
		return
	}
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	if bid, bsecret, ok := r.BasicAuth(); ok {
		id, _ = url.QueryUnescape(bid)
		secret, _ = url.QueryUnescape(bsecret)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.seed.ClientID || secret != s.seed.ClientSecret {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "Client authentication failed")
		return
	}
	tok, ttl := s.issueTokenLocked(id)
	writeJSON(w, http.StatusOK, runai.TokenResponseV2{AccessToken: tok, TokenType: "Bearer", ExpiresIn: ttl})
}

// tokenV1 is Run:ai's JSON endpoint. The schema spells clientID, the 2.20
// docs clientId; both are accepted. Wrong credentials answer 401 with the
// vendor Error body: the document lists no 401 here, but an authentication
// failure is what a client must be able to tell apart from a bad request.
func (s *Server) tokenV1(w http.ResponseWriter, r *http.Request) {
	var req struct {
		GrantType    string `json:"grantType"`
		ClientID     string `json:"clientID"`
		ClientIDAlt  string `json:"clientId"`
		ClientSecret string `json:"clientSecret"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if req.GrantType != "client_credentials" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("grantType %q is not supported by the simulator (use client_credentials)", req.GrantType))
		return
	}
	id := req.ClientID
	if id == "" {
		id = req.ClientIDAlt
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.seed.ClientID || req.ClientSecret != s.seed.ClientSecret {
		writeError(w, http.StatusUnauthorized, "invalid client credentials")
		return
	}
	tok, ttl := s.issueTokenLocked(id)
	writeJSON(w, http.StatusOK, runai.TokenResponseV1{AccessToken: tok, ExpiresIn: ttl})
}

type ctxKey struct{}

// requireToken answers 401 unless the request carries a live bearer token.
func (s *Server) requireToken(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || tok == "" {
			writeError(w, http.StatusUnauthorized, "missing bearer token")
			return
		}
		s.mu.Lock()
		it, known := s.tokens[tok]
		expired := known && !s.nowLocked().Before(it.expires)
		if expired {
			delete(s.tokens, tok)
		}
		s.mu.Unlock()
		switch {
		case !known:
			writeError(w, http.StatusUnauthorized, "Issuer is not familiar.")
		case expired:
			writeError(w, http.StatusUnauthorized, "token expired")
		default:
			r.Header.Set("X-Sim-Client", it.clientID)
			h(w, r)
		}
	})
}

// ---- clusters and node pools ----------------------------------------------

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, []runai.Cluster{s.renderClusterLocked()})
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.PathValue("clusterUuid") != s.seed.Cluster.UUID {
		writeError(w, http.StatusNotFound, "cluster not found")
		return
	}
	writeJSON(w, http.StatusOK, s.renderClusterLocked())
}

func (s *Server) listNodePools(w http.ResponseWriter, r *http.Request) {
	filters, err := parseFilters(r.URL.Query()["filterBy"], nodePoolFields)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []runai.NodePool{}
	for _, np := range s.pools {
		v := map[string]string{"name": np.name, "clusterId": s.seed.Cluster.UUID, "phase": "Ready"}
		if filters.match(v) {
			items = append(items, s.renderNodePoolLocked(np))
		}
	}
	page, _, err := s.pageLocked(r, len(items))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, runai.NodePoolList{NodePools: items[page.from:page.to]})
}

// ---- departments -----------------------------------------------------------

// departmentJSON is the vendor's Department / DepartmentForList. It is not
// runai.Department because the vendor requires description, resources and
// totalResources, which that type may omit.
type departmentJSON struct {
	ID                          string               `json:"id"`
	Name                        string               `json:"name"`
	ClusterID                   string               `json:"clusterId"`
	Description                 string               `json:"description"`
	CreatedAt                   time.Time            `json:"createdAt"`
	UpdatedAt                   time.Time            `json:"updatedAt"`
	CreatedBy                   string               `json:"createdBy"`
	UpdatedBy                   string               `json:"updatedBy"`
	Resources                   []runai.Resources    `json:"resources"`
	TotalResources              runai.TotalResources `json:"totalResources"`
	Children                    []childJSON          `json:"children"`
	ProjectsAggregatedResources []aggregatedJSON     `json:"projectsAggregatedResources,omitempty"`
	Status                      *departmentStatus    `json:"status,omitempty"`
}

type departmentStatus struct {
	QuotaStatus           *runai.QuotaStatus          `json:"quotaStatus,omitempty"`
	NodePoolQuotaStatuses []runai.NodePoolQuotaStatus `json:"nodePoolQuotaStatuses,omitempty"`
}

type childJSON struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type aggregatedJSON struct {
	NodePool runai.NodePoolRef `json:"nodePool"`
	GPU      struct {
		Deserved float64 `json:"deserved"`
	} `json:"gpu"`
}

// departmentWireLocked renders a department. full adds what only
// get-by-id carries (per-pool status, aggregated project quota); status adds
// status (verbosity=verbose, or get-by-id).
func (s *Server) departmentWireLocked(d *department, status, full bool) departmentJSON {
	rd := s.renderDepartmentLocked(d)
	out := departmentJSON{
		ID: rd.ID, Name: rd.Name, ClusterID: rd.ClusterID, Description: rd.Description,
		CreatedAt: rd.CreatedAt, UpdatedAt: rd.UpdatedAt, CreatedBy: "admin@example.com", UpdatedBy: "admin@example.com",
		Resources: rd.Resources, TotalResources: *rd.TotalResources, Children: []childJSON{},
	}
	for _, id := range sortedIDs(s.projects) {
		if p := s.projects[id]; p.parentID == d.id {
			out.Children = append(out.Children, childJSON{ID: p.id, Name: p.name})
		}
	}
	if status {
		out.Status = &departmentStatus{QuotaStatus: rd.Status.QuotaStatus}
	}
	if full {
		out.Status.NodePoolQuotaStatuses = rd.Status.NodePoolQuotaStatuses
		for _, np := range s.pools {
			a := aggregatedJSON{NodePool: runai.NodePoolRef{ID: np.id, Name: np.name}}
			for _, p := range s.projects {
				if p.parentID == d.id {
					a.GPU.Deserved += p.deservedOn(np.id)
				}
			}
			out.ProjectsAggregatedResources = append(out.ProjectsAggregatedResources, a)
		}
	}
	return out
}

func (s *Server) listDepartments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filters, err := parseFilters(q["filterBy"], departmentFields)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	verbosity := q.Get("verbosity")
	switch verbosity {
	case "", "meta", "brief", "verbose":
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("verbosity %q: want meta, brief or verbose", verbosity))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	var items []*department
	for _, id := range sortedIDs(s.depts) {
		d := s.depts[id]
		alloc := s.deptAllocLocked(d)
		v := map[string]string{
			"name": d.name, "clusterId": s.seed.Cluster.UUID, "createdAt": d.createdAt.Format(time.RFC3339),
			"totalGpuQuota": fmtNum(d.deserved), "gpuAllocated": fmtNum(sumAllocated(alloc)),
		}
		if filters.match(v) && matchSearch(q.Get("search"), d.name) {
			items = append(items, d)
		}
	}
	if err := sortItems(items, q, func(d *department) (string, string, float64) { return d.name, d.id, d.deserved }); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	page, next, err := s.pageLocked(r, len(items))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := struct {
		Departments []departmentJSON `json:"departments"`
		Next        *int             `json:"next,omitempty"`
	}{Departments: []departmentJSON{}, Next: next}
	for _, d := range items[page.from:page.to] {
		out.Departments = append(out.Departments, s.departmentWireLocked(d, verbosity == "verbose", false))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getDepartment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	d := s.depts[r.PathValue("departmentId")]
	if d == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("department %q not found", r.PathValue("departmentId")))
		return
	}
	writeJSON(w, http.StatusOK, s.departmentWireLocked(d, true, true))
}

func sumAllocated(m map[string]allocation) float64 {
	var sum float64
	for _, a := range m {
		sum += a.allocated
	}
	return sum
}

// ---- projects --------------------------------------------------------------

// projectJSON adds parent, which the vendor returns and runai.Project does not carry.
type projectJSON struct {
	runai.Project
	Parent *childJSON `json:"parent,omitempty"`
}

func (s *Server) projectWireLocked(p *project) projectJSON {
	out := projectJSON{Project: s.renderProjectLocked(p)}
	if d := s.depts[p.parentID]; d != nil {
		out.Parent = &childJSON{ID: d.id, Name: d.name}
	}
	return out
}

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filters, err := parseFilters(q["filterBy"], projectFields)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	var items []*project
	for _, id := range sortedIDs(s.projects) {
		p := s.projects[id]
		parentName := ""
		if d := s.depts[p.parentID]; d != nil {
			parentName = d.name
		}
		var deserved float64
		for _, res := range p.resources {
			deserved += res.DeservedGPU()
		}
		v := map[string]string{
			"name": p.name, "clusterId": s.seed.Cluster.UUID, "parentId": p.parentID, "departmentId": p.parentID,
			"parentName": parentName, "phase": p.currentPhase(), "createdAt": p.createdAt.Format(time.RFC3339),
			"totalGpuQuota": fmtNum(deserved), "gpuAllocated": fmtNum(sumAllocated(p.alloc)),
		}
		if filters.match(v) && matchSearch(q.Get("search"), p.name) {
			items = append(items, p)
		}
	}
	if err := sortItems(items, q, func(p *project) (string, string, float64) { return p.name, p.id, 0 }); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	page, next, err := s.pageLocked(r, len(items))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := struct {
		Projects []projectJSON `json:"projects"`
		Next     *int          `json:"next,omitempty"`
	}{Projects: []projectJSON{}, Next: next}
	for _, p := range items[page.from:page.to] {
		out.Projects = append(out.Projects, s.projectWireLocked(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	p := s.projects[r.PathValue("projectId")]
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("project %q not found", r.PathValue("projectId")))
		return
	}
	writeJSON(w, http.StatusOK, s.projectWireLocked(p))
}

// createProject implements POST /api/v1/org-unit/projects: 400 on a
// malformed request, 409 when the name is taken in the cluster or the
// requested namespace is held by another project (also one still
// Deleting: the namespace is not free until the project is gone), else 201
// with the project in phase Creating (Ready at once without a create delay).
func (s *Server) createProject(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	body := new(bytes.Buffer)
	if _, err := body.ReadFrom(r.Body); err != nil {
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	if err := json.Unmarshal(body.Bytes(), &raw); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	for _, field := range []string{"name", "clusterId", "resources"} {
		if v, ok := raw[field]; !ok || string(v) == "null" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Required parameter is missing: %s", field))
			return
		}
	}
	var req runai.ProjectCreationRequest
	if err := json.Unmarshal(body.Bytes(), &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid project: "+err.Error())
		return
	}
	if !validName(req.Name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid project name %q: must be at most 63 characters, lowercase letters, digits and '-', start with a letter and end with a letter or digit", req.Name))
		return
	}
	if req.RequestedNamespace != "" && !validNamespace(req.RequestedNamespace) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid requestedNamespace %q: not a valid Kubernetes namespace name", req.RequestedNamespace))
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	if req.ClusterID != s.seed.Cluster.UUID {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown clusterId %q", req.ClusterID))
		return
	}
	parentID := ""
	if req.ParentID != nil {
		parentID = *req.ParentID
	}
	if parentID == "" {
		// Open question 4 in API-NOTES: we assume an omitted parent means
		// the cluster's "default" department, as the CLI defaults to it.
		d := s.deptByNameLocked(DefaultDepartment)
		if d == nil {
			writeError(w, http.StatusBadRequest, "parentId omitted and there is no department named default")
			return
		}
		parentID = d.id
	}
	if s.depts[parentID] == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown parentId %q", parentID))
		return
	}
	resources, err := s.normalizeResourcesLocked(req.Resources)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	for _, np := range req.DefaultNodePools {
		if s.poolByNameLocked(np) == nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("defaultNodePools: unknown node pool %q", np))
			return
		}
	}
	ns := req.RequestedNamespace
	if ns == "" {
		ns = "runai-" + req.Name
	}
	for _, id := range sortedIDs(s.projects) {
		other := s.projects[id]
		if other.name == req.Name {
			writeError(w, http.StatusConflict, fmt.Sprintf("Resource with this name already exists: project %q (id %s, phase %s)", other.name, other.id, other.currentPhase()))
			return
		}
		if other.boundNamespace() == ns {
			writeError(w, http.StatusConflict, fmt.Sprintf("namespace %q is already bound to project %q (id %s, phase %s)", ns, other.name, other.id, other.currentPhase()))
			return
		}
	}
	now := s.nowLocked()
	p := &project{
		id: s.nextIDLocked(), name: req.Name, parentID: parentID, namespace: ns,
		description: req.Description, enforce: req.EnforceRunaiScheduler == nil || *req.EnforceRunaiScheduler,
		resources: resources, defaultNPs: req.DefaultNodePools, schedRules: req.SchedulingRules, nodeTypes: req.NodeTypes,
		createdAt: now, updatedAt: now, createdBy: r.Header.Get("X-Sim-Client"),
		readyAt: now.Add(s.seed.CreateDelay), phase: runai.PhaseCreating, alloc: map[string]allocation{},
	}
	if req.RequestedNamespace != "" {
		p.requestedNS = str(req.RequestedNamespace)
	}
	if s.seed.CreateDelay <= 0 {
		p.phase = runai.PhaseReady
	}
	s.projects[p.id] = p
	writeJSON(w, http.StatusCreated, s.projectWireLocked(p))
}

// normalizeResourcesLocked checks node pools and fills what the vendor
// defaults: a missing nodePool is the default pool, gpu.deserved defaults
// to 0 (the response requires it).
func (s *Server) normalizeResourcesLocked(in []runai.Resources) ([]runai.Resources, error) {
	out := make([]runai.Resources, 0, len(in))
	seen := map[string]bool{}
	for i, r := range in {
		np := s.defaultPoolLocked()
		if r.NodePool != nil {
			if np = s.poolByIDLocked(r.NodePool.ID); np == nil {
				return nil, fmt.Errorf("resources[%d].nodePool.id %q: no such node pool", i, r.NodePool.ID)
			}
			if r.NodePool.Name != "" && r.NodePool.Name != np.name {
				return nil, fmt.Errorf("resources[%d].nodePool: id %q is node pool %q, not %q", i, np.id, np.name, r.NodePool.Name)
			}
		}
		if seen[np.id] {
			return nil, fmt.Errorf("resources[%d]: node pool %q listed twice", i, np.name)
		}
		seen[np.id] = true
		if r.GPU.Deserved == nil {
			r.GPU.Deserved = f64(0)
		}
		if *r.GPU.Deserved < 0 {
			return nil, fmt.Errorf("resources[%d].gpu.deserved must not be negative", i)
		}
		if r.Memory != nil && r.Memory.Units == "" {
			return nil, fmt.Errorf("resources[%d].memory.units is required", i)
		}
		r.NodePool = &runai.NodePoolRef{ID: np.id, Name: np.name}
		out = append(out, r)
	}
	return out, nil
}

// deleteProject answers 202 and starts Deleting when a delete delay is set,
// else removes the project and answers 204.
func (s *Server) deleteProject(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	p := s.projects[r.PathValue("projectId")]
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("project %q not found", r.PathValue("projectId")))
		return
	}
	if s.seed.DeleteDelay <= 0 {
		delete(s.projects, p.id)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if p.phase != runai.PhaseDeleting {
		p.phase = runai.PhaseDeleting
		p.goneAt = s.nowLocked().Add(s.seed.DeleteDelay)
		p.updatedAt = s.nowLocked()
	}
	w.WriteHeader(http.StatusAccepted)
}

// ---- telemetry -------------------------------------------------------------

var nodeTelemetryTypes = []string{
	"READY_GPU_NODES", "READY_GPUS", "TOTAL_GPU_NODES", "TOTAL_GPUS", "IDLE_ALLOCATED_GPUS", "FREE_GPUS",
	"ALLOCATED_GPUS", "TOTAL_CPU_CORES", "USED_CPU_CORES", "ALLOCATED_CPU_CORES", "TOTAL_GPU_MEMORY_BYTES",
	"USED_GPU_MEMORY_BYTES", "TOTAL_CPU_MEMORY_BYTES", "USED_CPU_MEMORY_BYTES", "ALLOCATED_CPU_MEMORY_BYTES",
	"FULLY_FREE_GPU_NODES",
}

// gpusPerNode sizes the simulated nodes, for the *_GPU_NODES types.
const gpusPerNode = 8

func (s *Server) telemetryValueLocked(typ string, np *nodePool) float64 {
	free := s.freeGPUsLocked(np)
	switch typ {
	case "TOTAL_GPUS", "READY_GPUS":
		return np.total
	case "FREE_GPUS":
		return free
	case "ALLOCATED_GPUS":
		return max(0, np.total-free)
	case "TOTAL_GPU_NODES", "READY_GPU_NODES":
		return math.Ceil(np.total / gpusPerNode)
	case "FULLY_FREE_GPU_NODES":
		return math.Floor(free / gpusPerNode)
	default: // CPU, memory and idle figures: the simulator does not model them
		return 0
	}
}

func (s *Server) nodesTelemetry(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	typ := q.Get("telemetryType")
	if typ == "" {
		writeError(w, http.StatusBadRequest, "Required parameter is missing: telemetryType")
		return
	}
	if !slices.Contains(nodeTelemetryTypes, typ) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown telemetryType %q", typ))
		return
	}
	var groupBy []string
	for _, g := range q["groupBy"] {
		groupBy = append(groupBy, strings.Split(g, ",")...)
	}
	if len(groupBy) > 2 {
		writeError(w, http.StatusBadRequest, "groupBy takes at most 2 fields")
		return
	}
	for _, g := range groupBy {
		switch g {
		case "ClusterId", "Nodepool":
		case "Node":
			writeError(w, http.StatusBadRequest, "groupBy Node: the simulator does not model nodes")
			return
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("groupBy %q: want ClusterId, Nodepool or Node", g))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := q.Get("clusterId"); c != "" && c != s.seed.Cluster.UUID {
		writeError(w, http.StatusNotFound, fmt.Sprintf("cluster %q not found", c))
		return
	}
	var pools []*nodePool
	for _, np := range s.pools {
		if n := q.Get("nodepoolName"); n == "" || n == np.name {
			pools = append(pools, np)
		}
	}
	resp := runai.TelemetryResponse{Type: typ, Timestamp: s.nowLocked().Format(time.RFC3339), Values: []runai.TelemetryValue{}}
	byPool := slices.Contains(groupBy, "Nodepool")
	groups := func(np *nodePool) []runai.TelemetryGroup {
		var gs []runai.TelemetryGroup
		for _, g := range groupBy {
			if g == "ClusterId" {
				gs = append(gs, runai.TelemetryGroup{Key: "ClusterId", Value: s.seed.Cluster.UUID, Name: s.seed.Cluster.Name})
			} else if np != nil {
				gs = append(gs, runai.TelemetryGroup{Key: "Nodepool", Value: np.name, Name: np.name})
			}
		}
		return gs
	}
	if byPool {
		for _, np := range pools {
			resp.Values = append(resp.Values, runai.TelemetryValue{Value: fmtNum(s.telemetryValueLocked(typ, np)), Groups: groups(np)})
		}
	} else if len(pools) > 0 {
		var sum float64
		for _, np := range pools {
			sum += s.telemetryValueLocked(typ, np)
		}
		resp.Values = append(resp.Values, runai.TelemetryValue{Value: fmtNum(sum), Groups: groups(nil)})
	}
	writeJSON(w, http.StatusOK, resp)
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
