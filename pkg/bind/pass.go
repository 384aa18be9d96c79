package bind

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// PassResult counts what one background pass found and did.
type PassResult struct {
	Namespaces     int // managed namespaces looked at
	Bound          int // newly bound (created or adopted)
	Rebound        int // stale labels cleared and bound again
	Drift          int // projects in another department than their mapping
	Unbound        int // still unbound after the pass (Run:ai refused or failed)
	OrphansDeleted int // projects we created whose namespace is gone
	Failures       []string
}

// Pass is the background pass: bind what is unbound, repair stale bindings,
// report drift and delete projects we created whose namespace is gone. It
// reads Run:ai's projects and departments once (all pages) and answers every
// namespace from that, so a pass over thousands of bound namespaces costs a
// few list pages and no write.
func (c *Controller) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	b := c.Binder
	var all corev1.NamespaceList
	if err := c.Client.List(ctx, &all); err != nil {
		return res, fmt.Errorf("listing namespaces: %w", err)
	}
	if !b.Enabled {
		for i := range all.Items {
			ns := &all.Items[i]
			v := View(ns)
			if b.Keys.Managed(v) && (b.Keys.BoundProject(v) != "" || b.Keys.OwnedProjectID(v) != "") {
				c.setStatus(ctx, ns, StatusBindingLeft, "the Run:ai integration is off but the namespace still carries its Run:ai binding labels; Run:ai keeps scheduling its pods (see `runai-webhook leave`)")
			}
		}
		return res, nil
	}
	cluster, err := b.Cluster(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the Run:ai cluster: %w", err)
	}
	projects, err := b.RunAI.ListProjects(ctx, cluster.UUID, "")
	if err != nil {
		return res, fmt.Errorf("listing Run:ai projects: %w", err)
	}
	depts, err := b.RunAI.ListDepartments(ctx, cluster.UUID, "")
	if err != nil {
		return res, fmt.Errorf("listing Run:ai departments: %w", err)
	}
	ix := NewProjectIndex(projects)
	ix.SetDepartments(depts)

	exists := make(map[string]bool, len(all.Items))
	for i := range all.Items {
		ns := &all.Items[i]
		exists[ns.Name] = true
		v := View(ns)
		if !b.Keys.Managed(v) || v.Terminating {
			continue
		}
		res.Namespaces++
		if err := c.passOne(ctx, ns, ix, &res); err != nil {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: %v", ns.Name, err))
		}
	}
	c.deleteOrphans(ctx, ix, exists, &res)
	if len(res.Failures) > 0 {
		return res, fmt.Errorf("%d namespace(s) failed: %s", len(res.Failures), strings.Join(res.Failures[:min(5, len(res.Failures))], "; "))
	}
	return res, nil
}

// SetDepartments adds the cluster's departments to the index.
func (ix *ProjectIndex) SetDepartments(depts []runai.Department) {
	ix.DeptByName = map[string]runai.Department{}
	ix.DeptByID = map[string]runai.Department{}
	for _, d := range depts {
		ix.DeptByName[d.Name] = d
		ix.DeptByID[d.ID] = d
	}
}

func (c *Controller) passOne(ctx context.Context, ns *corev1.Namespace, ix *ProjectIndex, res *PassResult) error {
	b := c.Binder
	v := View(ns)
	bound := b.Keys.BoundProject(v)
	ownedID := b.Keys.OwnedProjectID(v)
	var p runai.Project
	var found bool
	switch {
	case bound == "":
	case ownedID != "":
		p, found = ix.ByID[ownedID]
	default:
		p, found = ix.ByName[bound]
	}
	if bound != "" && (!found || p.BoundNamespace() != ns.Name) {
		// The project was deleted (or rebound) in Run:ai: the labels lie.
		if err := c.clearBinding(ctx, ns); err != nil {
			return err
		}
		b.event(ns, corev1.EventTypeWarning, "ProjectGone", "Run:ai project %s is gone or bound elsewhere; binding the namespace again", bound)
		res.Rebound++
		bound = ""
	}
	if bound == "" {
		out, err := b.bind(ctx, ns.Name, ix)
		if err != nil {
			res.Unbound++
			c.setStatus(ctx, ns, StatusNotBound, err.Error())
			b.event(ns, corev1.EventTypeWarning, "BindFailed", "not bound to Run:ai yet: %v", err)
			var refusal *Refusal
			if errors.As(err, &refusal) {
				return nil
			}
			return err
		}
		if !out.AlreadyBound {
			res.Bound++
		}
		c.setStatus(ctx, ns, StatusOK, "bound to Run:ai project "+out.Project)
		return nil
	}
	want, err := c.expectedDepartment(v, ix)
	if err != nil {
		return nil // a bad label is refused at admission; nothing to compare
	}
	if want.ID != "" && p.ParentID != want.ID {
		res.Drift++
		have := p.ParentID
		if d, ok := ix.DeptByID[p.ParentID]; ok {
			have = d.Name
		}
		c.setStatus(ctx, ns, StatusDrift, fmt.Sprintf("Run:ai project %s is in department %s, but the namespace's department maps to %s; a Run:ai administrator must move it", p.Name, have, want.Name))
		return nil
	}
	c.setStatus(ctx, ns, StatusOK, "bound to Run:ai project "+p.Name)
	return nil
}

// expectedDepartment maps the namespace's department through the index.
func (c *Controller) expectedDepartment(ns nsview.Namespace, ix *ProjectIndex) (runai.Department, error) {
	hd, err := c.Binder.Keys.HopsworksDepartment(ns)
	if err != nil {
		return runai.Department{}, err
	}
	if d, ok := ix.DeptByName[hd]; ok && hd != "" {
		return d, nil
	}
	return ix.DeptByName[c.Binder.DefaultDepartment], nil
}

// clearBinding removes the binding labels of a namespace whose project is gone.
func (c *Controller) clearBinding(ctx context.Context, ns *corev1.Namespace) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null,%q:null}}}`, c.Binder.Keys.Queue, nsview.ProjectIDLabel)
	if err := c.Client.Patch(ctx, ns, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("clearing stale binding labels: %w", err)
	}
	return nil
}

// deleteOrphans deletes projects carrying our marker whose namespace no
// longer exists (a namespace deleted while the finalizer was not yet there).
// The namespace's absence is confirmed by a live read first, so a project
// bound a moment ago is never taken for an orphan.
func (c *Controller) deleteOrphans(ctx context.Context, ix *ProjectIndex, exists map[string]bool, res *PassResult) {
	b := c.Binder
	for _, p := range ix.ByID {
		ns := p.BoundNamespace()
		if ns == "" || exists[ns] || !CreatedByUs(p, ns) || p.Status.Phase == runai.PhaseDeleting {
			continue
		}
		var live corev1.Namespace
		if err := b.Reader.Get(ctx, client.ObjectKey{Name: ns}, &live); !apierrors.IsNotFound(err) {
			continue
		}
		if err := b.RunAI.DeleteProject(ctx, p.ID); err != nil {
			res.Failures = append(res.Failures, fmt.Sprintf("deleting orphaned Run:ai project %s: %v", p.Name, err))
			continue
		}
		c.Log.Info("deleted orphaned Run:ai project", "project", p.Name, "id", p.ID, "namespace", ns)
		res.OrphansDeleted++
	}
}

// setStatus writes the status annotation when it changed, with an event.
func (c *Controller) setStatus(ctx context.Context, ns *corev1.Namespace, code, detail string) {
	val := code
	if code != StatusOK {
		val = code + ": " + detail
	}
	if ns.Annotations[StatusAnnotation] == val {
		return
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, StatusAnnotation, val)
	if err := c.Client.Patch(ctx, ns, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		c.Log.Info("writing namespace status", "namespace", ns.Name, "error", err.Error())
		return
	}
	if code == StatusDrift {
		c.Binder.event(ns, corev1.EventTypeWarning, StatusDrift, "%s", detail)
	}
}
