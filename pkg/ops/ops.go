// Package ops holds the administrator's operations behind the CLI:
// deleting a Hopsworks department (moving its namespaces to the default one
// through the namespace guard), leaving Run:ai, and the Kueue preflight. They
// act through the Kubernetes API as the caller, so the same admission rules
// and previews (--dry-run) apply as for kubectl.
package ops

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// Warnings collects the API server's warning headers (our webhooks' messages).
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.list = append(w.list, text)
	w.mu.Unlock()
}

// Take returns and clears the collected warnings.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// NewClient returns a client for cfg whose warnings land in w.
func NewClient(cfg *rest.Config, scheme client.Options, w *Warnings) (client.Client, error) {
	c := rest.CopyConfig(cfg)
	c.WarningHandler = w
	return client.New(c, scheme)
}

// DepartmentDeleteResult lists what a department deletion did.
type DepartmentDeleteResult struct {
	Moved, Remaining []string
	Refused          string // the refusal that stopped it, if any
}

// DeleteDepartment moves every namespace of Hopsworks department dept to the
// default department (removes the label), one at a time through the
// namespace guard, and stops at the first refusal: namespaces moved before it
// stay moved, the rest keep the department. With dryRun nothing changes and
// the guard's previews are printed.
func DeleteDepartment(ctx context.Context, c client.Client, w *Warnings, keys nsview.Keys, dept string, dryRun bool, out io.Writer) (DepartmentDeleteResult, error) {
	var res DepartmentDeleteResult
	var list corev1.NamespaceList
	if err := c.List(ctx, &list, client.MatchingLabels{keys.Department: dept}, client.HasLabels{keys.Project}); err != nil {
		return res, fmt.Errorf("listing namespaces of department %s: %w", dept, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	sort.Strings(names)
	verb := "moved"
	if dryRun {
		verb = "would move"
	}
	fmt.Fprintf(out, "department %s: %d namespace(s) to move to the default department\n", dept, len(names))
	for i, name := range names {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, keys.Department)
		ns := &corev1.Namespace{}
		ns.Name = name
		var opts []client.PatchOption
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		err := c.Patch(ctx, ns, client.RawPatch("application/merge-patch+json", patch), opts...)
		for _, warning := range w.Take() {
			fmt.Fprintf(out, "  %s: %s\n", name, warning)
		}
		if err != nil {
			res.Refused = fmt.Sprintf("%s: %v", name, err)
			res.Remaining = names[i:]
			fmt.Fprintf(out, "stopped at %s: %v\n", name, err)
			fmt.Fprintf(out, "%s %d: %s\nremaining in department %s: %s\n", verb, len(res.Moved), strings.Join(res.Moved, ", "), dept, strings.Join(res.Remaining, ", "))
			return res, fmt.Errorf("department %s not deleted: namespace %s refused the move", dept, name)
		}
		res.Moved = append(res.Moved, name)
		fmt.Fprintf(out, "%s %s to the default department\n", verb, name)
	}
	fmt.Fprintf(out, "%s %d namespace(s); department %s has no namespace left\n", verb, len(res.Moved), dept)
	return res, nil
}

// LeaveResult lists what leaving Run:ai did.
type LeaveResult struct {
	DeletedProjects []string // owned projects deleted
	KeptProjects    []string // adopted projects left in place
	Unlabelled      []string // namespaces whose binding labels were removed
}

// Leave deletes the Run:ai projects we created for managed namespaces and
// removes the binding labels (and our finalizer) from them. Adopted projects
// belong to whoever bound them and are left in place. The integration must be
// off (run_ai_enable=false), or the namespace guard refuses the label removal.
func Leave(ctx context.Context, c client.Client, api runai.API, keys nsview.Keys, dryRun bool, out io.Writer) (LeaveResult, error) {
	var res LeaveResult
	var list corev1.NamespaceList
	if err := c.List(ctx, &list, client.HasLabels{keys.Project}); err != nil {
		return res, fmt.Errorf("listing managed namespaces: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	prefix := ""
	if dryRun {
		prefix = "(dry run) would "
	}
	for i := range list.Items {
		ns := &list.Items[i]
		v := bind.View(ns)
		project, id := keys.BoundProject(v), keys.OwnedProjectID(v)
		if project == "" && id == "" && !slices.Contains(ns.Finalizers, bind.Finalizer) {
			continue
		}
		if id != "" {
			p, err := api.GetProject(ctx, id)
			switch {
			case runai.IsNotFound(err):
			case err != nil:
				return res, fmt.Errorf("reading Run:ai project %s of namespace %s: %w", id, ns.Name, err)
			case bind.CreatedByUs(p, ns.Name):
				fmt.Fprintf(out, "%sdelete Run:ai project %s (id %s) of namespace %s; its workloads stop\n", prefix, p.Name, p.ID, ns.Name)
				if !dryRun {
					if err := api.DeleteProject(ctx, p.ID); err != nil {
						return res, fmt.Errorf("deleting Run:ai project %s: %w", p.Name, err)
					}
					wctx, cancel := context.WithTimeout(ctx, time.Minute)
					err := api.WaitProjectGone(wctx, p.ID)
					cancel()
					if err != nil {
						return res, fmt.Errorf("waiting for Run:ai project %s to go: %w", p.Name, err)
					}
				}
				res.DeletedProjects = append(res.DeletedProjects, p.Name)
			default:
				id = ""
			}
		}
		if id == "" && project != "" {
			fmt.Fprintf(out, "%skeep Run:ai project %s of namespace %s: it was adopted and belongs to whoever bound it\n", prefix, project, ns.Name)
			res.KeptProjects = append(res.KeptProjects, project)
		}
		fmt.Fprintf(out, "%sremove %s and %s from namespace %s\n", prefix, keys.Queue, nsview.ProjectIDLabel, ns.Name)
		if !dryRun {
			patch := client.MergeFrom(ns.DeepCopy())
			delete(ns.Labels, keys.Queue)
			delete(ns.Labels, nsview.ProjectIDLabel)
			ns.Finalizers = slices.DeleteFunc(ns.Finalizers, func(f string) bool { return f == bind.Finalizer })
			if err := c.Patch(ctx, ns, patch); err != nil {
				return res, fmt.Errorf("removing the binding labels of namespace %s (is run_ai_enable false?): %w", ns.Name, err)
			}
		}
		res.Unlabelled = append(res.Unlabelled, ns.Name)
	}
	fmt.Fprintf(out, "%s: %d Run:ai project(s) deleted, %d adopted kept, %d namespace(s) unbound\n",
		map[bool]string{true: "dry run", false: "left Run:ai"}[dryRun], len(res.DeletedProjects), len(res.KeptProjects), len(res.Unlabelled))
	return res, nil
}

// StillBound lists the namespaces Run:ai still binds (queue label present):
// they must be unbound before Kueue is enabled, or Run:ai's admission
// webhooks and Kueue both act on their pods.
func StillBound(ctx context.Context, c client.Client, queueLabel string) ([]string, error) {
	var list corev1.NamespaceList
	if err := c.List(ctx, &list, client.HasLabels{queueLabel}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var out []string
	for _, ns := range list.Items {
		out = append(out, fmt.Sprintf("%s (%s=%s)", ns.Name, queueLabel, ns.Labels[queueLabel]))
	}
	sort.Strings(out)
	return out, nil
}
