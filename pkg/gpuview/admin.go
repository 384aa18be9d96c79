package gpuview

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// AdminView is the body of GET /api/v1/admin/runai: the seed's Cluster
// settings Departments and Projects pages. Numbers are summed over node pools
// and null when Run:ai was not read in this request.
type AdminView struct {
	// Status is OK, RUN_AI_UNREACHABLE (Run:ai could not be read; rows carry
	// no numbers) or, with the integration off, RUN_AI_BINDING_LEFT when
	// namespaces still carry binding labels (else OK).
	Status            string     `json:"status"`
	Message           string     `json:"message"`
	Enabled           bool       `json:"enabled"`
	DefaultDepartment string     `json:"default_department"`
	ReadAt            *time.Time `json:"read_at"`
	// Departments: every Hopsworks department (distinct values of the
	// namespace department label, and the default department, name "").
	Departments []DepartmentRow `json:"departments"`
	// Projects: every managed namespace.
	Projects []ProjectRow `json:"projects"`
	// RunAIDepartments: every Run:ai department linked to managed
	// namespaces (their projects' departments and the departments the
	// Hopsworks departments map to).
	RunAIDepartments []RunAIDepartmentRow `json:"runai_departments"`
}

// DepartmentRow is one Hopsworks department and its Run:ai counterpart.
type DepartmentRow struct {
	// Name is the label value; "" is the default department (Default true).
	Name       string `json:"name"`
	Default    bool   `json:"default"`
	Namespaces int    `json:"namespaces"`
	// Linked: a Run:ai department of its name exists (for the default
	// department: run_ai_default_department exists). Null when unknown.
	Linked  *bool  `json:"linked"`
	Status  string `json:"status"`
	Message string `json:"message"`
	// RunAIDepartment is the linked Run:ai department ("" when not linked).
	RunAIDepartment   string `json:"runai_department"`
	RunAIDepartmentID string `json:"runai_department_id"`
	// ProjectsGoTo is the Run:ai department new projects of its namespaces
	// are created in: its twin, else run_ai_default_department.
	ProjectsGoTo  string   `json:"projects_go_to"`
	GPUQuota      *float64 `json:"gpu_quota"`
	AllocatedGPUs *float64 `json:"allocated_gpus"`
}

// ProjectRow is one managed namespace and its Run:ai project.
type ProjectRow struct {
	Namespace           string `json:"namespace"`
	HopsworksDepartment string `json:"hopsworks_department"`
	Project             string `json:"project"`
	ProjectID           string `json:"project_id"`
	// Owned: the project was created by runai-webhook (ownership label).
	Owned bool `json:"owned"`
	// Department is the Run:ai department the project is in.
	Department    string   `json:"department"`
	Linked        *bool    `json:"linked"`
	Status        string   `json:"status"`
	Message       string   `json:"message"`
	GPUQuota      *float64 `json:"gpu_quota"`
	AllocatedGPUs *float64 `json:"allocated_gpus"`
}

// RunAIDepartmentRow is a Run:ai department linked to managed namespaces.
type RunAIDepartmentRow struct {
	Name                 string   `json:"name"`
	ID                   string   `json:"id"`
	GPUQuota             *float64 `json:"gpu_quota"`
	AllocatedGPUs        *float64 `json:"allocated_gpus"`
	HopsworksDepartments []string `json:"hopsworks_departments"`
	Projects             []string `json:"projects"`
}

// NamespaceInfo is a managed namespace as the admin view reads it.
type NamespaceInfo struct {
	Namespace   nsview.Namespace
	Annotations map[string]string
}

// AdminFacts is everything the admin view is computed from.
type AdminFacts struct {
	Namespaces        []NamespaceInfo
	Enabled           bool
	DefaultDepartment string
	// Projects and Departments are every project and department of the
	// cluster, read once; ignored when ReadErr is set or Enabled is false.
	Projects    []runai.Project
	Departments []runai.Department
	ReadErr     error
	At          time.Time
}

// Admin computes the admin view.
func Admin(keys nsview.Keys, f AdminFacts) AdminView {
	v := AdminView{Enabled: f.Enabled, DefaultDepartment: f.DefaultDepartment, Status: StatusOK,
		Departments: []DepartmentRow{}, Projects: []ProjectRow{}, RunAIDepartments: []RunAIDepartmentRow{}}
	read := f.Enabled && f.ReadErr == nil
	var ix *bind.ProjectIndex
	if read {
		ix = bind.NewProjectIndex(f.Projects)
		ix.SetDepartments(f.Departments)
		at := f.At.UTC()
		v.ReadAt = &at
	}
	switch {
	case !f.Enabled:
		v.Message = "the Run:ai integration is off (run_ai_enable=false): nothing is read from Run:ai"
	case f.ReadErr != nil:
		v.Status = StatusUnreachable
		v.Message = "Run:ai could not be read (" + f.ReadErr.Error() + "); no numbers are shown rather than old ones"
	}

	// Hopsworks departments: the default one always, then every label value.
	counts := map[string]int{"": 0}
	for _, n := range f.Namespaces {
		counts[n.Namespace.Labels[keys.Department]]++
	}
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	slices.Sort(names) // "" (the default department) first
	linkedRunAI := map[string]*RunAIDepartmentRow{}
	link := func(d runai.Department) *RunAIDepartmentRow {
		r, ok := linkedRunAI[d.ID]
		if !ok {
			q, a := departmentNumbers(d)
			r = &RunAIDepartmentRow{Name: d.Name, ID: d.ID, GPUQuota: &q, AllocatedGPUs: &a, HopsworksDepartments: []string{}, Projects: []string{}}
			linkedRunAI[d.ID] = r
		}
		return r
	}
	for _, name := range names {
		row := DepartmentRow{Name: name, Default: name == "", Namespaces: counts[name]}
		switch {
		case !f.Enabled:
			row.Linked, row.Status = ptr(false), StatusNotLinked
			row.Message = "the Run:ai integration is off"
		case !read:
			row.Status = StatusUnreachable
		default:
			departmentRow(&row, f.DefaultDepartment, ix, link)
		}
		v.Departments = append(v.Departments, row)
	}

	// Projects: every managed namespace.
	infos := slices.Clone(f.Namespaces)
	slices.SortFunc(infos, func(a, b NamespaceInfo) int { return strings.Compare(a.Namespace.Name, b.Namespace.Name) })
	leftover := false
	for _, n := range infos {
		ns := n.Namespace
		row := ProjectRow{Namespace: ns.Name, HopsworksDepartment: ns.Labels[keys.Department], Project: keys.BoundProject(ns),
			ProjectID: keys.OwnedProjectID(ns), Owned: keys.OwnedProjectID(ns) != ""}
		switch {
		case !f.Enabled:
			if row.Project != "" || row.ProjectID != "" {
				leftover = true
				row.Status = StatusBindingLeft
				row.Message = "the integration is off but the namespace still carries its Run:ai binding labels"
			} else {
				row.Linked, row.Status = ptr(false), StatusNotLinked
				row.Message = "the Run:ai integration is off"
			}
		case row.Project == "":
			row.Linked, row.Status = ptr(false), StatusNotLinked
			row.Message = "not bound to Run:ai yet"
			if code, detail := ParseStatusAnnotation(n.Annotations[bind.StatusAnnotation]); code == StatusNotBound && detail != "" {
				row.Message += ": " + detail
			}
		case !read:
			row.Status = StatusUnreachable
		default:
			projectRow(&row, keys, n, f.DefaultDepartment, ix, link)
		}
		v.Projects = append(v.Projects, row)
	}
	if !f.Enabled && leftover {
		v.Status = StatusBindingLeft
		v.Message += "; some namespaces still carry Run:ai binding labels and Run:ai keeps scheduling their pods"
	}
	for _, r := range linkedRunAI {
		slices.Sort(r.HopsworksDepartments)
		r.HopsworksDepartments = slices.Compact(r.HopsworksDepartments)
		slices.Sort(r.Projects)
		v.RunAIDepartments = append(v.RunAIDepartments, *r)
	}
	slices.SortFunc(v.RunAIDepartments, func(a, b RunAIDepartmentRow) int { return strings.Compare(a.Name, b.Name) })
	return v
}

func departmentRow(row *DepartmentRow, defaultDept string, ix *bind.ProjectIndex, link func(runai.Department) *RunAIDepartmentRow) {
	label := row.Name
	if row.Default {
		label = "(default)"
	}
	def, defOK := ix.DeptByName[defaultDept]
	twinName := row.Name
	if row.Default {
		twinName = defaultDept
	}
	if !row.Default && !config.ValidDepartmentName(row.Name) {
		row.Linked, row.Status = ptr(false), StatusNotLinked
		row.Message = fmt.Sprintf("department label %q breaks the naming rule (at most 63 lowercase letters, digits and '-'); its namespaces cannot be bound", row.Name)
		return
	}
	if d, ok := ix.DeptByName[twinName]; ok {
		q, a := departmentNumbers(d)
		row.Linked, row.Status = ptr(true), StatusOK
		row.RunAIDepartment, row.RunAIDepartmentID, row.ProjectsGoTo = d.Name, d.ID, d.Name
		row.GPUQuota, row.AllocatedGPUs = &q, &a
		r := link(d)
		r.HopsworksDepartments = append(r.HopsworksDepartments, label)
		return
	}
	row.Linked, row.Status = ptr(false), StatusNotLinked
	if row.Default || !defOK {
		row.Message = fmt.Sprintf("run_ai_default_department %q does not exist in Run:ai; its namespaces cannot be bound until it is created or the setting changed", defaultDept)
		return
	}
	row.ProjectsGoTo = def.Name
	row.Message = fmt.Sprintf("no Run:ai department named %s; its projects go to the default department %s", row.Name, def.Name)
	r := link(def)
	r.HopsworksDepartments = append(r.HopsworksDepartments, label)
}

func projectRow(row *ProjectRow, keys nsview.Keys, n NamespaceInfo, defaultDept string, ix *bind.ProjectIndex, link func(runai.Department) *RunAIDepartmentRow) {
	var p runai.Project
	var found bool
	if row.ProjectID != "" {
		p, found = ix.ByID[row.ProjectID]
	} else {
		p, found = ix.ByName[row.Project]
	}
	if !found || p.BoundNamespace() != n.Namespace.Name {
		row.Linked, row.Status = ptr(false), StatusNotLinked
		row.Message = fmt.Sprintf("Run:ai project %s no longer exists or is bound elsewhere; the background pass binds the namespace again", row.Project)
		return
	}
	q, a := projectNumbers(p)
	row.Linked, row.Status = ptr(true), StatusOK
	row.Project, row.ProjectID = p.Name, p.ID
	row.GPUQuota, row.AllocatedGPUs = &q, &a
	row.Department = p.ParentID
	if d, ok := ix.DeptByID[p.ParentID]; ok {
		row.Department = d.Name
		r := link(d)
		r.Projects = append(r.Projects, p.Name)
	}
	hd, err := keys.HopsworksDepartment(n.Namespace)
	if err != nil {
		return
	}
	want, ok := ix.DeptByName[hd]
	if hd == "" || !ok {
		want, ok = ix.DeptByName[defaultDept]
	}
	if ok && p.ParentID != want.ID {
		row.Status = StatusDrift
		row.Message = fmt.Sprintf("Run:ai project %s is in department %s, but the namespace's department maps to %s; a Run:ai administrator must move it", p.Name, row.Department, want.Name)
	}
}

// departmentNumbers: GPU quota (totalResources.gpuQuota, else the sum of
// resources[].gpu.deserved) and allocated GPUs (status.quotaStatus, else the
// sum over node pools), both summed over node pools.
func departmentNumbers(d runai.Department) (quota, allocated float64) {
	if d.TotalResources != nil && d.TotalResources.GPUQuota != nil {
		quota = *d.TotalResources.GPUQuota
	} else {
		for _, r := range d.Resources {
			quota += r.DeservedGPU()
		}
	}
	if d.Status != nil {
		allocated = allocatedSum(d.Status.QuotaStatus, d.Status.NodePoolQuotaStatuses)
	}
	return round(quota), round(allocated)
}

// projectNumbers is departmentNumbers for a project.
func projectNumbers(p runai.Project) (quota, allocated float64) {
	if p.TotalResources.GPUQuota != nil {
		quota = *p.TotalResources.GPUQuota
	} else {
		for _, r := range p.Resources {
			quota += r.DeservedGPU()
		}
	}
	return round(quota), round(allocatedSum(p.Status.QuotaStatus, p.Status.NodePoolQuotaStatuses))
}

func allocatedSum(total *runai.QuotaStatus, pools []runai.NodePoolQuotaStatus) float64 {
	if total != nil && total.Allocated != nil {
		return total.Allocated.GPU
	}
	sum := 0.0
	for _, st := range pools {
		if st.Allocated != nil {
			sum += st.Allocated.GPU
		}
	}
	return sum
}
