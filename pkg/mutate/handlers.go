package mutate

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// Injector is the inject webhook: pods in bound namespaces get the queue label
// and the Run:ai scheduler. It reads only the namespace and calls nothing
// remote, which is why its failurePolicy can be Ignore: the guard refuses a
// pod it missed.
type Injector struct {
	Settings   Settings
	Keys       nsview.Keys
	Namespaces nsview.Getter
	Enabled    bool
}

// Handle is the admission.Handler of the inject webhook.
func (i *Injector) Handle(ctx context.Context, req *admission.Request) admission.Response {
	if !i.Enabled || req.Operation != "CREATE" {
		return admission.Allow()
	}
	pod, err := workload.Decode(req.Object)
	if err != nil {
		return admission.Response{Code: http.StatusBadRequest, Reason: "malformed", Message: "runai-webhook: " + err.Error()}
	}
	ns, found, err := i.Namespaces.Get(ctx, req.Namespace)
	if err != nil || !found || !i.Keys.Managed(ns) {
		// Ignore-policy webhook: never block on our own trouble.
		return admission.Allow()
	}
	project := i.Keys.BoundProject(ns)
	if project == "" {
		return admission.Allow()
	}
	resp := admission.Allow()
	resp.Patch = Plan(pod, project, req.UID, i.Settings)
	if req.IsDryRun() {
		resp.Warnings = append(resp.Warnings, "runai-webhook: "+describe(resp.Patch, project, i.Settings))
	}
	return resp
}

// Binder binds namespaces to Run:ai projects (pkg/bind).
type Binder interface {
	Bind(ctx context.Context, namespace string) (bind.Outcome, error)
	Preview(ctx context.Context, namespace string) (bind.Outcome, error)
}

// PodChecker runs the pod guard's rules (validate.PodGuard.Check).
type PodChecker interface {
	Check(ctx context.Context, pod, old *workload.Pod, ns nsview.Namespace, admissionID string, dryRun bool) admission.Response
}

// BindHook is the bind webhook: the first pod of a managed, unbound namespace
// binds the namespace inside admission, then is mutated and checked like any
// pod of a bound namespace. Its failurePolicy is Fail: a pod admitted in an
// unbound namespace would run outside any Run:ai quota.
type BindHook struct {
	Settings   Settings
	Keys       nsview.Keys
	Namespaces nsview.Getter
	Binder     Binder
	Guard      PodChecker
	Enabled    bool
}

// Handle is the admission.Handler of the bind webhook.
func (b *BindHook) Handle(ctx context.Context, req *admission.Request) admission.Response {
	if !b.Enabled || req.Operation != "CREATE" {
		return admission.Allow()
	}
	pod, err := workload.Decode(req.Object)
	if err != nil {
		return admission.Response{Code: http.StatusBadRequest, Reason: "malformed", Message: "runai-webhook: " + err.Error()}
	}
	ns, found, err := b.Namespaces.Get(ctx, req.Namespace)
	if err != nil {
		return admission.Response{Code: http.StatusServiceUnavailable, Reason: "namespace_unreadable",
			Message: fmt.Sprintf("runai-webhook could not read namespace %s: %v; retry", req.Namespace, err)}
	}
	if !found || !b.Keys.Managed(ns) {
		return admission.Allow()
	}
	var warnings []string
	project := b.Keys.BoundProject(ns)
	if project == "" {
		var out bind.Outcome
		if req.IsDryRun() {
			out, err = b.Binder.Preview(ctx, ns.Name)
		} else {
			out, err = b.Binder.Bind(ctx, ns.Name)
		}
		if err != nil {
			return notBound(ns.Name, err)
		}
		project = out.Project
		ns.Labels = withLabel(ns.Labels, b.Keys.Queue, out.Project)
		if out.ProjectID != "" && !out.Adopted {
			ns.Labels = withLabel(ns.Labels, nsview.ProjectIDLabel, out.ProjectID)
		}
		switch {
		case req.IsDryRun() && out.Adopted:
			warnings = append(warnings, fmt.Sprintf("runai-webhook: namespace %s would be bound to its existing Run:ai project %s in department %s (adopted)", ns.Name, out.Project, out.Department))
		case req.IsDryRun():
			warnings = append(warnings, fmt.Sprintf("runai-webhook: namespace %s would be bound to a new Run:ai project %s in department %s", ns.Name, out.Project, out.Department))
		case !out.Ready:
			warnings = append(warnings, fmt.Sprintf("runai-webhook: Run:ai project %s is still being set up; the pod waits in its queue until the project is Ready", out.Project))
		}
	}
	ops := Plan(pod, project, req.UID, b.Settings)
	if req.IsDryRun() {
		warnings = append(warnings, "runai-webhook: "+describe(ops, project, b.Settings))
	}
	verdict := b.Guard.Check(ctx, Apply(pod, project, req.UID, b.Settings), nil, ns, req.UID, req.IsDryRun())
	if !verdict.Allowed {
		verdict.Warnings = append(warnings, verdict.Warnings...)
		return verdict
	}
	resp := admission.Allow(append(warnings, verdict.Warnings...)...)
	resp.Patch = ops
	return resp
}

// notBound is the refusal of a pod whose namespace could not be bound. It
// says why and that a retry works, because the cause is nearly always Run:ai
// being down or slow, and the pod must not run outside the project's quota.
func notBound(ns string, err error) admission.Response {
	var refusal *bind.Refusal
	if errors.As(err, &refusal) {
		return admission.Deny("bind_refused", fmt.Sprintf("namespace %s is not bound to Run:ai: %s", ns, refusal.Message))
	}
	return admission.Response{Code: http.StatusServiceUnavailable, Reason: "not_bound", Message: fmt.Sprintf(
		"namespace %s is not bound to Run:ai yet, so the pod cannot start (it would run outside the project's GPU quota): %v. "+
			"Retry later; the first pod after Run:ai answers again binds the namespace", ns, err)}
}

func withLabel(l map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(l)+1)
	for a, b := range l {
		out[a] = b
	}
	out[k] = v
	return out
}
