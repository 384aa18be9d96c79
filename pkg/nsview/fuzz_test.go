package nsview

import (
	"strings"
	"testing"

	"github.com/hopsworks/runai-webhook/pkg/config"
)

// FuzzNamespaceLabels reads arbitrary label values the way every decision
// does: the department label is "" (default department) when absent or
// empty, itself when it follows the naming rule, and an error naming the
// namespace, the label and the value otherwise; the binding accessors return
// exactly the label values; Managed follows the project label's presence,
// whatever its value.
func FuzzNamespaceLabels(f *testing.F) {
	f.Add("team-a", "research", true, "team-a", "1001", true)
	f.Add("team-a", "", true, "", "", true)
	f.Add("x", "Research", false, "q", "", true)
	f.Add("x", "-bad", true, "", "", false)
	f.Add("x", strings.Repeat("a", 64), true, "", "", true)
	f.Add("x", "a\nb", true, "", "", true)
	f.Add("x", "ünicode", true, "", "", true)
	keys := Keys{Queue: "runai/queue", Project: "hopsworks.ai/project", Department: "hopsworks.ai/department"}
	f.Fuzz(func(t *testing.T, name, dept string, hasDept bool, queue, id string, managed bool) {
		labels := map[string]string{}
		if managed {
			labels[keys.Project] = ""
		}
		if hasDept {
			labels[keys.Department] = dept
		}
		if queue != "" {
			labels[keys.Queue] = queue
		}
		if id != "" {
			labels[ProjectIDLabel] = id
		}
		ns := Namespace{Name: name, Labels: labels}
		if keys.Managed(ns) != managed {
			t.Fatalf("Managed = %v with the project label present: %v", keys.Managed(ns), managed)
		}
		if keys.BoundProject(ns) != queue || keys.OwnedProjectID(ns) != id {
			t.Fatalf("binding read as %q/%q, labels say %q/%q", keys.BoundProject(ns), keys.OwnedProjectID(ns), queue, id)
		}
		got, err := keys.HopsworksDepartment(ns)
		switch {
		case !hasDept || dept == "":
			if got != "" || err != nil {
				t.Fatalf("no department: got %q, %v", got, err)
			}
		case config.ValidDepartmentName(dept):
			if got != dept || err != nil {
				t.Fatalf("valid department %q: got %q, %v", dept, got, err)
			}
		default:
			if err == nil || got != "" {
				t.Fatalf("invalid department %q accepted as %q", dept, got)
			}
			msg := err.Error()
			if !strings.Contains(msg, keys.Department) || !strings.Contains(msg, "naming rule") || !strings.HasPrefix(msg, "namespace "+name+":") {
				t.Fatalf("refusal does not say what is wrong: %s", msg)
			}
		}
	})
}
