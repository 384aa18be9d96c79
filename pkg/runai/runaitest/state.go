package runaitest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// The simulator keeps its own model and renders vendor JSON from it on each
// answer. Phases are derived lazily from the clock (settleLocked) instead of
// timers, so a test that calls Advance sees the same transitions a real
// control plane would show after that much time, without sleeping.

type nodePool struct {
	id, name  string
	isDefault bool
	total     float64
	free      *float64 // pinned by the seed or SetFreeGPUs; nil = total - allocated
	createdAt time.Time
}

type department struct {
	id, name    string
	description string
	deserved    float64 // on the default node pool
	createdAt   time.Time
	updatedAt   time.Time
}

type allocation struct{ allocated, nonPreemptible float64 }

type project struct {
	id, name    string
	parentID    string
	requestedNS *string
	namespace   string // bound once Ready: requested or runai-<name>
	description string
	enforce     bool
	resources   []runai.Resources
	defaultNPs  []string
	schedRules  json.RawMessage
	nodeTypes   json.RawMessage
	createdAt   time.Time
	updatedAt   time.Time
	createdBy   string
	readyAt     time.Time
	phase       string // Creating until readyAt, then Ready; Deleting once deleted
	pinnedPhase string // SetProjectPhase overrides the derived phase
	goneAt      time.Time
	alloc       map[string]allocation // by node pool id
}

// settleLocked moves projects along Creating -> Ready and Deleting -> gone
// according to the simulated clock.
func (s *Server) settleLocked() {
	now := s.nowLocked()
	for id, p := range s.projects {
		switch p.phase {
		case runai.PhaseCreating:
			if !now.Before(p.readyAt) {
				p.phase = runai.PhaseReady
			}
		case runai.PhaseDeleting:
			if !now.Before(p.goneAt) {
				delete(s.projects, id)
			}
		}
	}
}

func (s *Server) nowLocked() time.Time { return time.Now().Add(s.skew).UTC() }

func (s *Server) nextIDLocked() string {
	s.lastID++
	return strconv.Itoa(s.lastID)
}

// sortedIDs orders ids numerically, which is creation order.
func sortedIDs[T any](m map[string]T) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		ai, _ := strconv.Atoi(a)
		bi, _ := strconv.Atoi(b)
		return ai - bi
	})
	return ids
}

func (s *Server) defaultPoolLocked() *nodePool {
	for _, np := range s.pools {
		if np.isDefault {
			return np
		}
	}
	return s.pools[0] // unreachable after Seed.Validate
}

func (s *Server) poolByIDLocked(id string) *nodePool {
	for _, np := range s.pools {
		if np.id == id {
			return np
		}
	}
	return nil
}

func (s *Server) poolByNameLocked(name string) *nodePool {
	for _, np := range s.pools {
		if np.name == name {
			return np
		}
	}
	return nil
}

func (s *Server) deptByNameLocked(name string) *department {
	for _, d := range s.depts {
		if d.name == name {
			return d
		}
	}
	return nil
}

func (s *Server) projectByNameLocked(name string) *project {
	for _, p := range s.projects {
		if p.name == name {
			return p
		}
	}
	return nil
}

// boundNamespace is the namespace a project holds, whether or not the
// cluster has finished binding it: a second project may not claim it.
func (p *project) boundNamespace() string {
	if p.requestedNS != nil {
		return *p.requestedNS
	}
	return p.namespace
}

func (p *project) currentPhase() string {
	if p.pinnedPhase != "" && p.phase != runai.PhaseDeleting {
		return p.pinnedPhase
	}
	return p.phase
}

func (p *project) deservedOn(poolID string) float64 {
	for _, r := range p.resources {
		if r.NodePool != nil && r.NodePool.ID == poolID {
			return r.DeservedGPU()
		}
	}
	return 0
}

// allocatedOnLocked sums what projects hold on a pool.
func (s *Server) allocatedOnLocked(poolID string) float64 {
	var sum float64
	for _, p := range s.projects {
		sum += p.alloc[poolID].allocated
	}
	return sum
}

func (s *Server) freeGPUsLocked(np *nodePool) float64 {
	if np.free != nil {
		return *np.free
	}
	return max(0, np.total-s.allocatedOnLocked(np.id))
}

func f64(v float64) *float64 { return &v }
func str(v string) *string   { return &v }

func phaseMessage(phase string) string {
	switch phase {
	case runai.PhaseCreating:
		return "Project is being created"
	case runai.PhaseReady:
		return "Project is ready"
	case runai.PhaseDeleting:
		return "Project is being deleted"
	default:
		return "Project is " + phase
	}
}

func quotaOf(a allocation) runai.QuotaStatus {
	return runai.QuotaStatus{
		Allocated:               &runai.QuotaAmounts{GPU: a.allocated},
		AllocatedNonPreemptible: &runai.QuotaAmounts{GPU: a.nonPreemptible},
		// Requested counts running and pending work; the simulator has no
		// pending work, so it equals what is allocated.
		Requested: &runai.QuotaAmounts{GPU: a.allocated},
	}
}

// renderProjectLocked builds the vendor Project. Every field the vendor
// schema requires is present: id, name, parentId, createdAt, updatedAt,
// totalResources, effective, status, description, enforceRunaiScheduler,
// clusterId, resources.
func (s *Server) renderProjectLocked(p *project) runai.Project {
	phase := p.currentPhase()
	out := runai.Project{
		ID: p.id, Name: p.name, ClusterID: s.seed.Cluster.UUID, ParentID: p.parentID,
		EnforceRunaiScheduler: p.enforce, Description: p.description,
		CreatedAt: p.createdAt, UpdatedAt: p.updatedAt, CreatedBy: p.createdBy, UpdatedBy: p.createdBy,
		Resources:        make([]runai.Resources, 0, len(p.resources)),
		SchedulingRules:  p.schedRules,
		DefaultNodePools: p.defaultNPs,
		NodeTypes:        p.nodeTypes,
	}
	if p.requestedNS != nil {
		out.RequestedNamespace = str(*p.requestedNS)
	}
	var total float64
	for _, r := range p.resources {
		out.Resources = append(out.Resources, r)
		total += r.DeservedGPU()
	}
	out.TotalResources = runai.TotalResources{GPUQuota: f64(total)}
	out.Effective = runai.ProjectEffective{SchedulingRules: p.schedRules, DefaultNodePools: p.defaultNPs, NodeTypes: p.nodeTypes}
	if out.Effective.DefaultNodePools == nil {
		out.Effective.DefaultNodePools = []string{s.defaultPoolLocked().name}
	}
	st := runai.ProjectStatus{Phase: phase, PhaseMessage: str(phaseMessage(phase))}
	if p.phase != runai.PhaseCreating {
		// The cluster reports the namespace once it has created or labelled
		// it; a pinned phase (SetProjectPhase) does not change that.
		st.Namespace = str(p.namespace)
	}
	var sum allocation
	for _, np := range s.pools {
		if !p.hasPool(np.id) {
			continue
		}
		a := p.alloc[np.id]
		sum.allocated += a.allocated
		sum.nonPreemptible += a.nonPreemptible
		st.NodePoolQuotaStatuses = append(st.NodePoolQuotaStatuses, runai.NodePoolQuotaStatus{
			QuotaStatus: quotaOf(a), NodePoolName: np.name, NodePoolID: np.id,
		})
	}
	q := quotaOf(sum)
	st.QuotaStatus = &q
	out.Status = st
	return out
}

func (p *project) hasPool(poolID string) bool {
	for _, r := range p.resources {
		if r.NodePool != nil && r.NodePool.ID == poolID {
			return true
		}
	}
	return false
}

// deptAllocLocked sums the allocation of the department's projects per pool.
func (s *Server) deptAllocLocked(d *department) map[string]allocation {
	out := map[string]allocation{}
	for _, p := range s.projects {
		if p.parentID != d.id {
			continue
		}
		for pool, a := range p.alloc {
			o := out[pool]
			o.allocated += a.allocated
			o.nonPreemptible += a.nonPreemptible
			out[pool] = o
		}
	}
	return out
}

func (s *Server) deptResourcesLocked(d *department) []runai.Resources {
	out := make([]runai.Resources, 0, len(s.pools))
	for _, np := range s.pools {
		deserved := 0.0
		if np.isDefault {
			deserved = d.deserved
		}
		out = append(out, runai.Resources{
			NodePool: &runai.NodePoolRef{ID: np.id, Name: np.name},
			GPU:      runai.ResourceAmount{Deserved: f64(deserved)},
		})
	}
	return out
}

// renderDepartmentLocked builds the runai.Department the Go API returns.
func (s *Server) renderDepartmentLocked(d *department) runai.Department {
	alloc := s.deptAllocLocked(d)
	var sum allocation
	st := &runai.DepartmentStatus{}
	for _, np := range s.pools {
		a := alloc[np.id]
		sum.allocated += a.allocated
		sum.nonPreemptible += a.nonPreemptible
		st.NodePoolQuotaStatuses = append(st.NodePoolQuotaStatuses, runai.NodePoolQuotaStatus{
			QuotaStatus: quotaOf(a), NodePoolName: np.name, NodePoolID: np.id,
		})
	}
	q := quotaOf(sum)
	st.QuotaStatus = &q
	return runai.Department{
		ID: d.id, Name: d.name, ClusterID: s.seed.Cluster.UUID, Description: d.description,
		CreatedAt: d.createdAt, UpdatedAt: d.updatedAt, Status: st,
		TotalResources: &runai.TotalResources{GPUQuota: f64(d.deserved)},
		Resources:      s.deptResourcesLocked(d),
	}
}

func (s *Server) renderNodePoolLocked(np *nodePool) runai.NodePool {
	return runai.NodePool{
		ID: np.id, Name: np.name, ClusterID: s.seed.Cluster.UUID, ClusterName: s.seed.Cluster.Name,
		LabelKey: "run.ai/node-pool", LabelValue: np.name, Phase: "Ready", IsDefault: np.isDefault,
		TenantID: s.seed.Cluster.TenantID, CreatedBy: "system", CreatedAt: np.createdAt,
		UpdatedBy: "system", UpdatedAt: np.createdAt,
	}
}

// ---- Go helpers for tests ------------------------------------------------

// AddDepartment creates a department (or returns the existing one of that
// name), as an administrator would in the Run:ai UI.
func (s *Server) AddDepartment(name string) runai.Department {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.deptByNameLocked(name); d != nil {
		return s.renderDepartmentLocked(d)
	}
	return s.renderDepartmentLocked(s.addDepartmentLocked(DepartmentSeed{Name: name}))
}

func (s *Server) addDepartmentLocked(ds DepartmentSeed) *department {
	now := s.nowLocked()
	d := &department{id: s.nextIDLocked(), name: ds.Name, deserved: ds.DeservedGPUs, createdAt: now, updatedAt: now}
	s.depts[d.id] = d
	return d
}

// AddProject creates a project that is already Ready and bound to its
// namespace, as if an administrator had made it: the adoption case. The
// department is created when it does not exist.
func (s *Server) AddProject(ps ProjectSeed) runai.Project {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renderProjectLocked(s.addProjectLocked(ps))
}

func (s *Server) addProjectLocked(ps ProjectSeed) *project {
	dept := ps.Department
	if dept == "" {
		dept = DefaultDepartment
	}
	d := s.deptByNameLocked(dept)
	if d == nil {
		d = s.addDepartmentLocked(DepartmentSeed{Name: dept})
	}
	ns := ps.Namespace
	if ns == "" {
		ns = "runai-" + ps.Name
	}
	pool := s.defaultPoolLocked()
	now := s.nowLocked()
	p := &project{
		id: s.nextIDLocked(), name: ps.Name, parentID: d.id, requestedNS: str(ns), namespace: ns,
		enforce: true, createdAt: now, updatedAt: now, createdBy: "admin@example.com",
		readyAt: now, phase: runai.PhaseReady,
		resources: []runai.Resources{{
			NodePool: &runai.NodePoolRef{ID: pool.id, Name: pool.name},
			GPU:      runai.ResourceAmount{Deserved: f64(ps.DeservedGPUs)},
		}},
		alloc: map[string]allocation{pool.id: {allocated: ps.Allocated, nonPreemptible: ps.AllocatedNonPreemptible}},
	}
	s.projects[p.id] = p
	return p
}

// Projects returns every project, in creation order, as GET would show it.
func (s *Server) Projects() []runai.Project {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	out := make([]runai.Project, 0, len(s.projects))
	for _, id := range sortedIDs(s.projects) {
		out = append(out, s.renderProjectLocked(s.projects[id]))
	}
	return out
}

// ProjectByName returns the project of that name.
func (s *Server) ProjectByName(name string) (runai.Project, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	p := s.projectByNameLocked(name)
	if p == nil {
		return runai.Project{}, false
	}
	return s.renderProjectLocked(p), true
}

// Departments returns every department in creation order, with status.
func (s *Server) Departments() []runai.Department {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	out := make([]runai.Department, 0, len(s.depts))
	for _, id := range sortedIDs(s.depts) {
		out = append(out, s.renderDepartmentLocked(s.depts[id]))
	}
	return out
}

// DepartmentByName returns the department of that name.
func (s *Server) DepartmentByName(name string) (runai.Department, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	d := s.deptByNameLocked(name)
	if d == nil {
		return runai.Department{}, false
	}
	return s.renderDepartmentLocked(d), true
}

// Cluster returns the simulated cluster.
func (s *Server) Cluster() runai.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renderClusterLocked()
}

func (s *Server) renderClusterLocked() runai.Cluster {
	return runai.Cluster{
		UUID: s.seed.Cluster.UUID, TenantID: s.seed.Cluster.TenantID, Name: s.seed.Cluster.Name,
		CreatedAt: s.started, Version: str(s.seed.Cluster.Version), Status: &runai.ClusterStatus{State: "Connected"},
	}
}

// NodePools returns the cluster's node pools.
func (s *Server) NodePools() []runai.NodePool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]runai.NodePool, 0, len(s.pools))
	for _, np := range s.pools {
		out = append(out, s.renderNodePoolLocked(np))
	}
	return out
}

// DefaultNodePool returns the node pool marked isDefault.
func (s *Server) DefaultNodePool() runai.NodePool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renderNodePoolLocked(s.defaultPoolLocked())
}

// Seed returns the seed the server runs with, defaults applied.
func (s *Server) Seed() Seed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seed
}

// DeleteProjectNow removes a project at once, with no Deleting phase, as if
// an administrator had deleted it long ago. It reports whether it existed.
func (s *Server) DeleteProjectNow(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projectByNameLocked(name)
	if p == nil {
		return false
	}
	delete(s.projects, p.id)
	return true
}

// MoveProject puts a project under another department, which Run:ai's API
// cannot do (PUT has no parentId): it simulates drift made behind our back.
func (s *Server) MoveProject(name, toDepartment string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projectByNameLocked(name)
	if p == nil {
		return fmt.Errorf("move project %q: no such project", name)
	}
	d := s.deptByNameLocked(toDepartment)
	if d == nil {
		return fmt.Errorf("move project %q: no department %q", name, toDepartment)
	}
	p.parentID = d.id
	p.updatedAt = s.nowLocked()
	return nil
}

// RenameDepartment renames a department in place (same id), so projects keep
// their parentId but the department name they were created under is gone.
func (s *Server) RenameDepartment(oldName, newName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deptByNameLocked(oldName)
	if d == nil {
		return fmt.Errorf("rename department %q: no such department", oldName)
	}
	if !validName(newName) {
		return fmt.Errorf("rename department %q: invalid name %q", oldName, newName)
	}
	if s.deptByNameLocked(newName) != nil {
		return fmt.Errorf("rename department %q: %q already exists", oldName, newName)
	}
	d.name = newName
	d.updatedAt = s.nowLocked()
	return nil
}

// SetAllocation sets what a project holds on the default node pool. Project
// and department quotaStatus, and FREE_GPUS of the pool (unless pinned by
// SetFreeGPUs), follow.
func (s *Server) SetAllocation(projectName string, allocated, allocatedNonPreemptible float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setAllocationLocked(projectName, s.defaultPoolLocked().name, allocated, allocatedNonPreemptible)
}

// SetNodePoolAllocation is SetAllocation for a named node pool.
func (s *Server) SetNodePoolAllocation(projectName, nodePoolName string, allocated, allocatedNonPreemptible float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setAllocationLocked(projectName, nodePoolName, allocated, allocatedNonPreemptible)
}

func (s *Server) setAllocationLocked(projectName, poolName string, allocated, nonPreemptible float64) error {
	p := s.projectByNameLocked(projectName)
	if p == nil {
		return fmt.Errorf("set allocation: no project %q", projectName)
	}
	np := s.poolByNameLocked(poolName)
	if np == nil {
		return fmt.Errorf("set allocation: no node pool %q", poolName)
	}
	if allocated < 0 || nonPreemptible < 0 || nonPreemptible > allocated {
		return fmt.Errorf("set allocation of %q: want 0 <= allocatedNonPreemptible (%g) <= allocated (%g)", projectName, nonPreemptible, allocated)
	}
	p.alloc[np.id] = allocation{allocated: allocated, nonPreemptible: nonPreemptible}
	return nil
}

// SetFreeGPUs pins FREE_GPUS of a node pool (telemetry); a negative value
// unpins it, so free is again total minus allocated.
func (s *Server) SetFreeGPUs(nodePoolName string, free float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	np := s.poolByNameLocked(nodePoolName)
	if np == nil {
		return fmt.Errorf("set free GPUs: no node pool %q", nodePoolName)
	}
	if free < 0 {
		np.free = nil
		return nil
	}
	np.free = f64(free)
	return nil
}

// SetProjectPhase pins the phase a project reports (e.g. NotReady), until
// called again with "". A Deleting project still reports Deleting.
func (s *Server) SetProjectPhase(name, phase string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projectByNameLocked(name)
	if p == nil {
		return fmt.Errorf("set phase: no project %q", name)
	}
	p.pinnedPhase = phase
	return nil
}

// SetCreateDelay and SetDeleteDelay change the delays for later requests.
func (s *Server) SetCreateDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seed.CreateDelay = d
}

// SetDeleteDelay: see SetCreateDelay.
func (s *Server) SetDeleteDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seed.DeleteDelay = d
}

// Advance moves the simulated clock forward: pending creations become
// Ready, deletions complete and tokens expire as if d had passed.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skew += d
	s.settleLocked()
}

// Now is the simulated clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}
