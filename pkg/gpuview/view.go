// Package gpuview serves the read-only GPU views of DESIGN.md §3 rules 8-9:
//
//	GET /api/v1/namespaces/{ns}/gpu  the GPU availability of one Hopsworks project
//	GET /api/v1/admin/runai          Hopsworks departments and projects next to their Run:ai twins
//
// Both are answered over the webhook's HTTPS port, authenticated with a
// TokenReview and authorized with a SubjectAccessReview (`get` on
// gpuavailability in the namespace, or cluster-wide `get` on runaiadmin, API
// group runai-webhook.hopsworks.ai; the Helm chart aggregates the first into
// the built-in `view` role).
//
// Reading a view has no side effect: the views never bind, never write to
// Kubernetes or Run:ai, and reach the binder only through Lookups (cached
// cluster, node pool and department reads). A namespace that is not bound yet
// answers RUN_AI_PROJECT_NOT_BOUND without any Run:ai call. When Run:ai cannot
// be read, the answer is HTTP 200 with RUN_AI_UNREACHABLE and null numbers:
// old numbers are never shown as if they were fresh.
//
// The computations (Namespace, Admin) are pure functions of what was read, so
// every status is table-tested; the Service reads, and the Handler adds HTTP
// and access control around it.
package gpuview

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/quota"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// Status codes of the namespace view (DESIGN.md §3 rule 8), shared with the
// status annotation the background pass writes.
const (
	StatusOK          = bind.StatusOK
	StatusNotBound    = bind.StatusNotBound
	StatusDrift       = bind.StatusDrift
	StatusBindingLeft = bind.StatusBindingLeft
	StatusUnreachable = bind.StatusUnreachable
	// StatusNotLinked is what the admin view shows for a Hopsworks
	// department or project with no Run:ai counterpart (the seed's words).
	StatusNotLinked = "Not linked in Run:ai"
)

// NamespaceView is the body of GET /api/v1/namespaces/{ns}/gpu. Numbers are
// GPUs on the project's default Run:ai node pool; they are null whenever they
// were not read in this request (not bound, integration off, Run:ai
// unreachable), never old values.
type NamespaceView struct {
	Namespace string `json:"namespace"`
	// HopsworksDepartment is the namespace's department label ("" = the
	// default department).
	HopsworksDepartment string `json:"hopsworks_department"`
	// Project is the Run:ai project the namespace is bound to ("" = none).
	Project string `json:"project"`
	// Department is the Run:ai department the project is in, as read now
	// ("" when Run:ai was not read).
	Department              string   `json:"department"`
	Status                  string   `json:"status"`
	Message                 string   `json:"message"`
	Deserved                *float64 `json:"deserved"`
	Allocated               *float64 `json:"allocated"`
	AllocatedNonPreemptible *float64 `json:"allocated_non_preemptible"`
	// AvailableNonPreemptible is deserved minus allocated non-preemptible,
	// never below 0: the GPUs notebooks, terminals, apps and deployments may
	// still take.
	AvailableNonPreemptible *float64 `json:"available_non_preemptible"`
	// AvailablePreemptible is the free GPUs of the node pool (telemetry
	// FREE_GPUS), what jobs may use over quota.
	AvailablePreemptible *float64 `json:"available_preemptible"`
	// TerminalGPUsAllowed is the seed's Terminal rule: the terminal offers
	// GPUs only to projects with deserved GPUs. False whenever deserved is
	// not known (fail closed).
	TerminalGPUsAllowed bool   `json:"terminal_gpus_allowed"`
	NodePool            string `json:"node_pool"`
	// ReadAt is when the numbers were read from Run:ai; null when they were not.
	ReadAt *time.Time `json:"read_at"`
}

// NumbersRead reports whether v carries numbers read from Run:ai.
func (v NamespaceView) NumbersRead() bool { return v.ReadAt != nil }

// NamespaceFacts is everything the namespace view is computed from.
type NamespaceFacts struct {
	Namespace   nsview.Namespace
	Annotations map[string]string
	// Enabled is run_ai_enable.
	Enabled bool
	// Read is what was read from Run:ai; nil when nothing was (see NeedsRead).
	Read *ProjectRead
	// ReadErr is why Run:ai could not be read.
	ReadErr error
}

// ProjectRead is one namespace's project as read from Run:ai.
type ProjectRead struct {
	At   time.Time
	Pool runai.NodePool
	// Project is nil when the project named by the labels no longer exists.
	Project *runai.Project
	// ProjectDepartment is the name of the project's department ("" unknown).
	ProjectDepartment string
	// Mapped is the Run:ai department the namespace's department label maps
	// to; nil when the mapping failed (MapErr says why).
	Mapped *runai.Department
	MapErr error
	// FreeGPUs of the default node pool; nil when FreeErr.
	FreeGPUs *float64
	FreeErr  error
}

// NeedsRead reports whether the view of ns needs Run:ai at all: only a
// managed, bound namespace with the integration on does. Everything else is
// answered from the namespace's labels, which is what makes the view of an
// unbound namespace free of side effects and independent of Run:ai.
func NeedsRead(keys nsview.Keys, ns nsview.Namespace, enabled bool) bool {
	return enabled && keys.Managed(ns) && keys.BoundProject(ns) != ""
}

// ParseStatusAnnotation splits the pass's status annotation ("CODE" or
// "CODE: detail").
func ParseStatusAnnotation(v string) (code, detail string) {
	code, detail, _ = strings.Cut(v, ": ")
	return strings.TrimSpace(code), strings.TrimSpace(detail)
}

// Namespace computes the namespace view. The order of the checks:
//
//  1. integration off: RUN_AI_BINDING_LEFT when binding labels remain, else
//     RUN_AI_PROJECT_NOT_BOUND; Run:ai is not read.
//  2. not bound: RUN_AI_PROJECT_NOT_BOUND, with the pass's reason when it
//     recorded one; Run:ai is not read.
//  3. Run:ai could not be read: RUN_AI_UNREACHABLE, null numbers.
//  4. the project named by the labels is gone or bound elsewhere:
//     RUN_AI_PROJECT_NOT_BOUND (the pass clears the labels and binds again).
//  5. drift, checked live: the project's department is not the one the
//     namespace's department maps to. When the live mapping fails (say the
//     default department is missing), the pass's annotation decides. A drift
//     the pass reported but the live check no longer sees (an administrator
//     moved the project since) is not shown: the live check is newer.
//  6. otherwise OK.
//
// Numbers are shown in 5 and 6 (drift does not make them wrong).
func Namespace(keys nsview.Keys, f NamespaceFacts) NamespaceView {
	ns := f.Namespace
	v := NamespaceView{Namespace: ns.Name, HopsworksDepartment: ns.Labels[keys.Department], Project: keys.BoundProject(ns)}
	annCode, annDetail := ParseStatusAnnotation(f.Annotations[bind.StatusAnnotation])
	if !f.Enabled {
		if v.Project != "" || keys.OwnedProjectID(ns) != "" {
			v.Status = StatusBindingLeft
			v.Message = "the Run:ai integration is off (run_ai_enable=false) but the namespace still carries its Run:ai binding labels; " +
				"Run:ai keeps scheduling its pods. To leave Run:ai, delete the Run:ai project and remove the labels " + keys.Queue + " and " + nsview.ProjectIDLabel
			return v
		}
		v.Status = StatusNotBound
		v.Message = "the Run:ai integration is off (run_ai_enable=false); the namespace is not bound to Run:ai"
		return v
	}
	if v.Project == "" {
		v.Status = StatusNotBound
		v.Message = "not bound to Run:ai yet; the background pass or the namespace's first workload binds it"
		if annCode == StatusNotBound && annDetail != "" {
			v.Message = "not bound to Run:ai yet: " + annDetail
		}
		return v
	}
	if f.ReadErr != nil || f.Read == nil {
		v.Status = StatusUnreachable
		why := "nothing was read"
		if f.ReadErr != nil {
			why = f.ReadErr.Error()
		}
		v.Message = "Run:ai could not be read (" + why + "); no numbers are shown rather than old ones. Workloads of bound projects still start"
		if annCode == StatusDrift {
			v.Message += ". The last background pass reported: " + annDetail
		}
		return v
	}
	r := f.Read
	p := r.Project
	if p == nil {
		v.Status = StatusNotBound
		v.Message = fmt.Sprintf("Run:ai project %s no longer exists; the background pass clears the stale labels and binds the namespace again", v.Project)
		return v
	}
	if b := p.BoundNamespace(); b != ns.Name {
		v.Status = StatusNotBound
		v.Message = fmt.Sprintf("Run:ai project %s is bound to namespace %q, not to this one; the background pass clears the stale labels and binds the namespace again", p.Name, b)
		return v
	}
	q := quota.FromProject(*p, r.Pool)
	deserved, nonPre := round(q.Deserved), round(q.AllocatedNonPreemptible)
	allocated := round(allocatedOn(*p, r.Pool))
	avail := round(math.Max(0, deserved-nonPre))
	at := r.At.UTC()
	v.Project = p.Name
	v.Department = r.ProjectDepartment
	v.NodePool = r.Pool.Name
	v.Deserved, v.Allocated, v.AllocatedNonPreemptible, v.AvailableNonPreemptible = &deserved, &allocated, &nonPre, &avail
	if r.FreeGPUs != nil {
		free := round(math.Max(0, *r.FreeGPUs))
		v.AvailablePreemptible = &free
	}
	v.TerminalGPUsAllowed = deserved > 0
	v.ReadAt = &at

	var notes []string
	switch {
	case r.Mapped != nil && p.ParentID != r.Mapped.ID:
		v.Status = StatusDrift
		have := r.ProjectDepartment
		if have == "" {
			have = "id " + p.ParentID
		}
		notes = append(notes, fmt.Sprintf("Run:ai project %s is in department %s, but the namespace's department %s maps to %s; a Run:ai administrator must move it",
			p.Name, have, deptWords(v.HopsworksDepartment), r.Mapped.Name))
	case r.Mapped == nil && annCode == StatusDrift:
		v.Status = StatusDrift
		notes = append(notes, annDetail+" (reported by the background pass; the department mapping could not be checked now")
		if r.MapErr != nil {
			notes[len(notes)-1] += ": " + r.MapErr.Error()
		}
		notes[len(notes)-1] += ")"
	default:
		v.Status = StatusOK
		if r.MapErr != nil {
			notes = append(notes, "the department mapping could not be checked: "+r.MapErr.Error())
		}
	}
	if r.FreeErr != nil {
		notes = append(notes, fmt.Sprintf("the free GPUs of node pool %s could not be read: %v", r.Pool.Name, r.FreeErr))
	}
	v.Message = strings.Join(notes, "; ")
	return v
}

func deptWords(hd string) string {
	if hd == "" {
		return "(default)"
	}
	return hd
}

// allocatedOn is the project's allocated GPUs on pool (status.nodePoolQuotaStatuses).
func allocatedOn(p runai.Project, pool runai.NodePool) float64 {
	for _, st := range p.Status.NodePoolQuotaStatuses {
		if (st.NodePoolID == pool.ID || (st.NodePoolID == "" && st.NodePoolName == pool.Name)) && st.Allocated != nil {
			return st.Allocated.GPU
		}
	}
	return 0
}

// round drops float noise (0.1+0.2) at 1/1000 GPU, as the quota check does.
func round(v float64) float64 { return math.Round(v*1000) / 1000 }

func ptr[T any](v T) *T { return &v }
