// Package nsview reads the Run:ai binding of a namespace from its labels: is
// it a Hopsworks project, which Hopsworks department it is in, which Run:ai
// project it is bound to, and whether we created that project. The labels are
// the only record of the binding, so every reader goes through here.
package nsview

import (
	"context"
	"fmt"

	"github.com/hopsworks/runai-webhook/pkg/config"
)

// ProjectIDLabel marks a namespace whose Run:ai project we created; its value
// is the project id. Only such projects are ever deleted or moved.
const ProjectIDLabel = "hopsworks.ai/runai-project-id"

// Keys are the label keys in use (configurable, see config.Config).
type Keys struct {
	Queue      string // runai/queue
	Project    string // hopsworks.ai/project: marks a managed namespace
	Department string // hopsworks.ai/department
}

// KeysFrom returns the keys configured in c.
func KeysFrom(c config.Config) Keys {
	return Keys{Queue: c.QueueLabelKey, Project: c.ProjectLabel, Department: c.DepartmentLabel}
}

// Namespace is the part of a namespace binding decisions read.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Terminating bool
}

// Managed reports whether ns is a Hopsworks project namespace.
func (k Keys) Managed(ns Namespace) bool {
	_, ok := ns.Labels[k.Project]
	return ok
}

// BoundProject returns the Run:ai project ns is bound to, "" when unbound.
func (k Keys) BoundProject(ns Namespace) string { return ns.Labels[k.Queue] }

// OwnedProjectID returns the id of the Run:ai project we created for ns, or
// "" when the binding was adopted or there is none.
func (k Keys) OwnedProjectID(ns Namespace) string { return ns.Labels[ProjectIDLabel] }

// HopsworksDepartment returns the namespace's Hopsworks department ("" =
// the default department) or an error when the label breaks the naming rule.
func (k Keys) HopsworksDepartment(ns Namespace) (string, error) {
	v, ok := ns.Labels[k.Department]
	if !ok || v == "" {
		return "", nil
	}
	if !config.ValidDepartmentName(v) {
		return "", fmt.Errorf("namespace %s: label %s=%q breaks the department naming rule (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)", ns.Name, k.Department, v)
	}
	return v, nil
}

// Getter reads a namespace (from a cache, with a live read for one the cache
// has not seen yet). found is false when the namespace does not exist.
type Getter interface {
	Get(ctx context.Context, name string) (ns Namespace, found bool, err error)
}
