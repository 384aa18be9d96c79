package gpuview_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/gpuview"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

const (
	queueKey   = "runai/queue"
	projectKey = "hopsworks.ai/project"
	deptKey    = "hopsworks.ai/department"
	idKey      = nsview.ProjectIDLabel
)

var keys = nsview.Keys{Queue: queueKey, Project: projectKey, Department: deptKey}

func f(v float64) *float64 { return &v }

var (
	pool     = runai.NodePool{ID: "np-1", Name: "default", IsDefault: true}
	other    = runai.NodePool{ID: "np-2", Name: "a100"}
	research = runai.Department{ID: "d-research", Name: "research"}
	defDept  = runai.Department{ID: "d-default", Name: "default"}
	readTime = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

// project is a Run:ai project bound to ns in dept, with deserved GPUs on the
// default pool (and 4 more on another pool, which must never be counted).
func project(ns, deptID string, deserved, allocated, nonPre float64) *runai.Project {
	return &runai.Project{
		ID: "p-" + ns, Name: ns, ParentID: deptID, RequestedNamespace: &ns,
		Resources: []runai.Resources{
			{NodePool: &runai.NodePoolRef{ID: pool.ID, Name: pool.Name}, GPU: runai.ResourceAmount{Deserved: f(deserved)}},
			{NodePool: &runai.NodePoolRef{ID: other.ID, Name: other.Name}, GPU: runai.ResourceAmount{Deserved: f(4)}},
		},
		Status: runai.ProjectStatus{Phase: runai.PhaseReady, Namespace: &ns, NodePoolQuotaStatuses: []runai.NodePoolQuotaStatus{
			{NodePoolID: pool.ID, NodePoolName: pool.Name, QuotaStatus: runai.QuotaStatus{
				Allocated: &runai.QuotaAmounts{GPU: allocated}, AllocatedNonPreemptible: &runai.QuotaAmounts{GPU: nonPre}}},
			{NodePoolID: other.ID, NodePoolName: other.Name, QuotaStatus: runai.QuotaStatus{
				Allocated: &runai.QuotaAmounts{GPU: 3}, AllocatedNonPreemptible: &runai.QuotaAmounts{GPU: 3}}},
		}},
	}
}

func ns(name string, kv ...string) nsview.Namespace {
	labels := map[string]string{projectKey: name}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	return nsview.Namespace{Name: name, Labels: labels}
}

func read(p *runai.Project, mapped *runai.Department, projectDept string, free *float64) *gpuview.ProjectRead {
	return &gpuview.ProjectRead{At: readTime, Pool: pool, Project: p, ProjectDepartment: projectDept, Mapped: mapped, FreeGPUs: free}
}

func TestNamespaceView(t *testing.T) {
	bound := ns("team", queueKey, "team", idKey, "p-team", deptKey, "research")
	drift := map[string]string{bind.StatusAnnotation: bind.StatusDrift + ": Run:ai project team is in department vision, but ..."}
	type want struct {
		status                                       string
		deserved, allocated, nonPre, avail, availPre *float64
		terminal                                     bool
		department, project                          string
		message                                      string // substring
	}
	cases := []struct {
		name  string
		facts gpuview.NamespaceFacts
		want  want
	}{
		{
			name:  "bound, numbers of the default pool only",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(project("team", research.ID, 4, 2.5, 1.5), &research, "research", f(3))},
			want:  want{status: gpuview.StatusOK, deserved: f(4), allocated: f(2.5), nonPre: f(1.5), avail: f(2.5), availPre: f(3), terminal: true, department: "research", project: "team"},
		},
		{
			name:  "more non-preemptible than deserved: available clamped to 0",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(project("team", research.ID, 1, 3, 3), &research, "research", f(0))},
			want:  want{status: gpuview.StatusOK, deserved: f(1), allocated: f(3), nonPre: f(3), avail: f(0), availPre: f(0), terminal: true, department: "research", project: "team"},
		},
		{
			name:  "float noise is rounded away",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(project("team", research.ID, 0.3, 0.1+0.2, 0.1+0.2), &research, "research", f(1))},
			want:  want{status: gpuview.StatusOK, deserved: f(0.3), allocated: f(0.3), nonPre: f(0.3), avail: f(0), availPre: f(1), terminal: true, department: "research", project: "team"},
		},
		{
			name:  "no deserved GPUs: the terminal offers none",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(project("team", research.ID, 0, 0, 0), &research, "research", f(5))},
			want:  want{status: gpuview.StatusOK, deserved: f(0), allocated: f(0), nonPre: f(0), avail: f(0), availPre: f(5), terminal: false, department: "research", project: "team"},
		},
		{
			name:  "not bound: no Run:ai read, null numbers",
			facts: gpuview.NamespaceFacts{Namespace: ns("fresh"), Enabled: true},
			want:  want{status: gpuview.StatusNotBound, message: "not bound to Run:ai yet"},
		},
		{
			name: "not bound, with the pass's reason",
			facts: gpuview.NamespaceFacts{Namespace: ns("fresh"), Enabled: true,
				Annotations: map[string]string{bind.StatusAnnotation: bind.StatusNotBound + ": run_ai_default_department \"default\" does not exist in Run:ai"}},
			want: want{status: gpuview.StatusNotBound, message: "not bound to Run:ai yet: run_ai_default_department"},
		},
		{
			name:  "integration off, labels still there: binding left",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: false},
			want:  want{status: gpuview.StatusBindingLeft, project: "team", message: "Run:ai keeps scheduling its pods"},
		},
		{
			name:  "integration off, only the ownership label left: binding left",
			facts: gpuview.NamespaceFacts{Namespace: ns("half", idKey, "p-1"), Enabled: false},
			want:  want{status: gpuview.StatusBindingLeft, message: "binding labels"},
		},
		{
			name:  "integration off, never bound",
			facts: gpuview.NamespaceFacts{Namespace: ns("plain"), Enabled: false},
			want:  want{status: gpuview.StatusNotBound, message: "integration is off"},
		},
		{
			name:  "Run:ai unreachable: null numbers, never old ones",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, ReadErr: errors.New("connection refused")},
			want:  want{status: gpuview.StatusUnreachable, project: "team", message: "connection refused"},
		},
		{
			name:  "Run:ai unreachable, the pass saw drift: said in the message",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Annotations: drift, ReadErr: errors.New("timeout")},
			want:  want{status: gpuview.StatusUnreachable, project: "team", message: "last background pass reported: Run:ai project team is in department vision"},
		},
		{
			name:  "drift checked live: project in another department than the label maps to",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(project("team", "d-vision", 2, 1, 1), &research, "vision", f(1))},
			want:  want{status: gpuview.StatusDrift, deserved: f(2), allocated: f(1), nonPre: f(1), avail: f(1), availPre: f(1), terminal: true, department: "vision", project: "team", message: "is in department vision, but the namespace's department research maps to research"},
		},
		{
			name:  "drift from the annotation when the live mapping fails",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Annotations: drift, Read: withMapErr(read(project("team", "d-vision", 2, 0, 0), nil, "vision", f(1)), errors.New("default department missing"))},
			want:  want{status: gpuview.StatusDrift, deserved: f(2), allocated: f(0), nonPre: f(0), avail: f(2), availPre: f(1), terminal: true, department: "vision", project: "team", message: "reported by the background pass"},
		},
		{
			name:  "annotation says drift but the live check sees none: live wins",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Annotations: drift, Read: read(project("team", research.ID, 2, 0, 0), &research, "research", f(1))},
			want:  want{status: gpuview.StatusOK, deserved: f(2), allocated: f(0), nonPre: f(0), avail: f(2), availPre: f(1), terminal: true, department: "research", project: "team"},
		},
		{
			name:  "default department: no label maps to the default department",
			facts: gpuview.NamespaceFacts{Namespace: ns("plain", queueKey, "plain"), Enabled: true, Read: read(project("plain", defDept.ID, 1, 0, 0), &defDept, "default", f(1))},
			want:  want{status: gpuview.StatusOK, deserved: f(1), allocated: f(0), nonPre: f(0), avail: f(1), availPre: f(1), terminal: true, department: "default", project: "plain"},
		},
		{
			name:  "project deleted in Run:ai: not bound",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(nil, &research, "", nil)},
			want:  want{status: gpuview.StatusNotBound, project: "team", message: "no longer exists"},
		},
		{
			name:  "project bound to another namespace: not bound",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: read(project("elsewhere", research.ID, 1, 0, 0), &research, "research", f(1))},
			want:  want{status: gpuview.StatusNotBound, project: "team", message: "bound to namespace \"elsewhere\""},
		},
		{
			name:  "telemetry refused: numbers without available_preemptible",
			facts: gpuview.NamespaceFacts{Namespace: bound, Enabled: true, Read: withFreeErr(read(project("team", research.ID, 2, 1, 1), &research, "research", nil), errors.New("403 forbidden"))},
			want:  want{status: gpuview.StatusOK, deserved: f(2), allocated: f(1), nonPre: f(1), avail: f(1), terminal: true, department: "research", project: "team", message: "free GPUs of node pool default could not be read: 403 forbidden"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := gpuview.Namespace(keys, tc.facts)
			w := tc.want
			assert.Equal(t, tc.facts.Namespace.Name, v.Namespace)
			assert.Equal(t, w.status, v.Status)
			assert.Equal(t, w.project, v.Project)
			assert.Equal(t, w.department, v.Department)
			assert.Equal(t, w.deserved, v.Deserved, "deserved")
			assert.Equal(t, w.allocated, v.Allocated, "allocated")
			assert.Equal(t, w.nonPre, v.AllocatedNonPreemptible, "allocated_non_preemptible")
			assert.Equal(t, w.avail, v.AvailableNonPreemptible, "available_non_preemptible")
			assert.Equal(t, w.availPre, v.AvailablePreemptible, "available_preemptible")
			assert.Equal(t, w.terminal, v.TerminalGPUsAllowed, "terminal_gpus_allowed")
			assert.Contains(t, v.Message, w.message)
			if w.deserved != nil {
				require.NotNil(t, v.ReadAt)
				assert.Equal(t, readTime, *v.ReadAt)
				assert.Equal(t, "default", v.NodePool)
			} else {
				assert.Nil(t, v.ReadAt, "no read time without numbers")
				assert.Empty(t, v.NodePool)
			}
		})
	}
}

func withMapErr(r *gpuview.ProjectRead, err error) *gpuview.ProjectRead {
	r.MapErr = err
	return r
}

func withFreeErr(r *gpuview.ProjectRead, err error) *gpuview.ProjectRead {
	r.FreeErr = err
	return r
}

func TestNeedsReadOnlyForBoundNamespacesWithTheIntegrationOn(t *testing.T) {
	assert.True(t, gpuview.NeedsRead(keys, ns("a", queueKey, "a"), true))
	assert.False(t, gpuview.NeedsRead(keys, ns("a"), true), "unbound: answered from labels")
	assert.False(t, gpuview.NeedsRead(keys, ns("a", queueKey, "a"), false), "integration off: no Run:ai call")
	assert.False(t, gpuview.NeedsRead(keys, nsview.Namespace{Name: "x", Labels: map[string]string{queueKey: "x"}}, true), "not managed")
}

func TestParseStatusAnnotation(t *testing.T) {
	for in, want := range map[string][2]string{
		"OK":                                   {"OK", ""},
		"RUN_AI_DEPARTMENT_DRIFT: moved: away": {"RUN_AI_DEPARTMENT_DRIFT", "moved: away"},
		"":                                     {"", ""},
	} {
		code, detail := gpuview.ParseStatusAnnotation(in)
		assert.Equal(t, want, [2]string{code, detail}, in)
	}
}

// ---- admin view -----------------------------------------------------------

func dept(id, name string, quota, allocated float64) runai.Department {
	return runai.Department{ID: id, Name: name, TotalResources: &runai.TotalResources{GPUQuota: f(quota)},
		Status: &runai.DepartmentStatus{QuotaStatus: &runai.QuotaStatus{Allocated: &runai.QuotaAmounts{GPU: allocated}}}}
}

func adminFacts() gpuview.AdminFacts {
	pA := project("a", "d-research", 2, 1, 1)
	pA.TotalResources.GPUQuota = f(6) // summed over node pools by Run:ai
	pA.Status.QuotaStatus = &runai.QuotaStatus{Allocated: &runai.QuotaAmounts{GPU: 4}}
	pM := project("m", "d-default", 1, 0, 0) // marketing: no twin, in the default department
	pM.TotalResources.GPUQuota = nil         // quota from resources[]: 1 + 4
	pM.Status.QuotaStatus = nil              // allocated from node pools: 0 + 3
	pD := project("d", "d-vision", 1, 0, 0)  // drift: research maps to research
	pGone := "gone"
	return gpuview.AdminFacts{
		Enabled: true, DefaultDepartment: "default", At: readTime,
		Namespaces: []gpuview.NamespaceInfo{
			{Namespace: ns("m", deptKey, "marketing", queueKey, "m", idKey, pM.ID)},
			{Namespace: ns("a", deptKey, "research", queueKey, "a", idKey, pA.ID)},
			{Namespace: ns("d", deptKey, "research", queueKey, "d")},
			{Namespace: ns("u", deptKey, "research"), Annotations: map[string]string{bind.StatusAnnotation: bind.StatusNotBound + ": Run:ai is unreachable"}},
			{Namespace: ns(pGone, queueKey, pGone, idKey, "p-deleted")},
			{Namespace: ns("bad", deptKey, "Sales!")},
		},
		Projects: []runai.Project{*pA, *pM, *pD, *project("unrelated", "d-vision", 9, 9, 9)},
		Departments: []runai.Department{
			dept("d-default", "default", 10, 2), dept("d-research", "research", 8, 4), dept("d-vision", "vision", 3, 1), dept("d-x", "unlinked", 1, 1),
		},
	}
}

func TestAdminView(t *testing.T) {
	v := gpuview.Admin(keys, adminFacts())
	assert.Equal(t, gpuview.StatusOK, v.Status)
	require.NotNil(t, v.ReadAt)

	depts := map[string]gpuview.DepartmentRow{}
	for _, d := range v.Departments {
		depts[d.Name] = d
	}
	require.Len(t, v.Departments, 4, "default, Sales!, marketing, research")
	assert.Equal(t, "", v.Departments[0].Name, "the default department first")

	def := depts[""]
	assert.True(t, def.Default)
	assert.Equal(t, 1, def.Namespaces)
	assert.Equal(t, f(10), def.GPUQuota)
	assert.Equal(t, f(2), def.AllocatedGPUs)
	assert.Equal(t, gpuview.StatusOK, def.Status)
	assert.Equal(t, "default", def.RunAIDepartment)

	mkt := depts["marketing"]
	require.NotNil(t, mkt.Linked)
	assert.False(t, *mkt.Linked)
	assert.Equal(t, gpuview.StatusNotLinked, mkt.Status)
	assert.Equal(t, "default", mkt.ProjectsGoTo, "its projects go to the default department")
	assert.Nil(t, mkt.GPUQuota, "no numbers for a department that is not linked")
	assert.Contains(t, mkt.Message, "no Run:ai department named marketing")

	res := depts["research"]
	require.NotNil(t, res.Linked)
	assert.True(t, *res.Linked)
	assert.Equal(t, 3, res.Namespaces)
	assert.Equal(t, f(8), res.GPUQuota)
	assert.Equal(t, f(4), res.AllocatedGPUs)
	assert.Equal(t, "d-research", res.RunAIDepartmentID)

	bad := depts["Sales!"]
	assert.Equal(t, gpuview.StatusNotLinked, bad.Status)
	assert.Contains(t, bad.Message, "naming rule")

	rows := map[string]gpuview.ProjectRow{}
	for _, p := range v.Projects {
		rows[p.Namespace] = p
	}
	require.Len(t, v.Projects, 6)
	assert.Equal(t, "a", v.Projects[0].Namespace, "sorted by namespace")

	a := rows["a"]
	assert.Equal(t, gpuview.StatusOK, a.Status)
	assert.Equal(t, "research", a.Department)
	assert.Equal(t, f(6), a.GPUQuota, "totalResources.gpuQuota: summed over node pools")
	assert.Equal(t, f(4), a.AllocatedGPUs, "status.quotaStatus.allocated")
	assert.True(t, a.Owned)

	m := rows["m"]
	assert.Equal(t, gpuview.StatusOK, m.Status, "a marketing project in the default department is where it belongs")
	assert.Equal(t, f(5), m.GPUQuota, "sum of resources[].gpu.deserved")
	assert.Equal(t, f(3), m.AllocatedGPUs, "sum of nodePoolQuotaStatuses")

	d := rows["d"]
	assert.Equal(t, gpuview.StatusDrift, d.Status)
	assert.False(t, d.Owned, "adopted")
	assert.Contains(t, d.Message, "is in department vision")

	u := rows["u"]
	require.NotNil(t, u.Linked)
	assert.False(t, *u.Linked)
	assert.Equal(t, gpuview.StatusNotLinked, u.Status, "a namespace not bound yet is not linked")
	assert.Contains(t, u.Message, "Run:ai is unreachable")
	assert.Nil(t, u.GPUQuota)

	gone := rows["gone"]
	assert.Equal(t, gpuview.StatusNotLinked, gone.Status)
	assert.Contains(t, gone.Message, "no longer exists")

	var names []string
	for _, r := range v.RunAIDepartments {
		names = append(names, r.Name)
	}
	assert.Equal(t, []string{"default", "research", "vision"}, names, "only departments linked to managed namespaces")
	assert.Equal(t, []string{"(default)", "marketing"}, v.RunAIDepartments[0].HopsworksDepartments)
	assert.Equal(t, []string{"m"}, v.RunAIDepartments[0].Projects)
	assert.Equal(t, []string{"a"}, v.RunAIDepartments[1].Projects)
	assert.Equal(t, []string{"d"}, v.RunAIDepartments[2].Projects)
	assert.Equal(t, f(3), v.RunAIDepartments[2].GPUQuota)
}

func TestAdminViewDefaultDepartmentMissing(t *testing.T) {
	facts := adminFacts()
	facts.DefaultDepartment = "nowhere"
	v := gpuview.Admin(keys, facts)
	for _, d := range v.Departments {
		switch d.Name {
		case "":
			assert.Equal(t, gpuview.StatusNotLinked, d.Status)
			assert.Contains(t, d.Message, `run_ai_default_department "nowhere" does not exist`)
		case "marketing":
			assert.Equal(t, gpuview.StatusNotLinked, d.Status)
			assert.Empty(t, d.ProjectsGoTo)
		}
	}
}

func TestAdminViewUnreachable(t *testing.T) {
	facts := adminFacts()
	facts.ReadErr = errors.New("connection refused")
	v := gpuview.Admin(keys, facts)
	assert.Equal(t, gpuview.StatusUnreachable, v.Status)
	assert.Contains(t, v.Message, "connection refused")
	assert.Nil(t, v.ReadAt)
	for _, d := range v.Departments {
		assert.Nil(t, d.Linked, d.Name)
		assert.Nil(t, d.GPUQuota, d.Name)
		assert.Equal(t, gpuview.StatusUnreachable, d.Status, d.Name)
	}
	for _, p := range v.Projects {
		assert.Nil(t, p.GPUQuota, p.Namespace)
		if p.Project == "" {
			assert.Equal(t, gpuview.StatusNotLinked, p.Status, "not bound is known from the labels: %s", p.Namespace)
		} else {
			assert.Equal(t, gpuview.StatusUnreachable, p.Status, p.Namespace)
		}
	}
	assert.Empty(t, v.RunAIDepartments)
}

func TestAdminViewIntegrationOff(t *testing.T) {
	facts := adminFacts()
	facts.Enabled = false
	v := gpuview.Admin(keys, facts)
	assert.Equal(t, gpuview.StatusBindingLeft, v.Status, "namespaces still carry binding labels")
	assert.False(t, v.Enabled)
	for _, p := range v.Projects {
		if p.Project != "" {
			assert.Equal(t, gpuview.StatusBindingLeft, p.Status, p.Namespace)
		} else {
			assert.Equal(t, gpuview.StatusNotLinked, p.Status, p.Namespace)
		}
	}
	facts.Namespaces = []gpuview.NamespaceInfo{{Namespace: ns("clean")}}
	assert.Equal(t, gpuview.StatusOK, gpuview.Admin(keys, facts).Status, "nothing left behind")
}
