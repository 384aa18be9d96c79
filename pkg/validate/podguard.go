package validate

import (
	"context"
	"fmt"
	"net/http"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/quota"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// QuotaChecker is the quota tracker as the guard sees it.
type QuotaChecker interface {
	Check(ctx context.Context, r quota.Request) quota.Result
}

// PodGuard is the validating webhook for pods in bound namespaces.
type PodGuard struct {
	Rules      PodRules
	Keys       nsview.Keys
	Namespaces nsview.Getter
	Quota      QuotaChecker
	// Enabled is run_ai_enable; off, every pod passes untouched.
	Enabled bool
}

// Handle is the admission.Handler of the guard.
func (g *PodGuard) Handle(ctx context.Context, req *admission.Request) admission.Response {
	if !g.Enabled || (req.Operation != "CREATE" && req.Operation != "UPDATE") {
		return admission.Allow()
	}
	pod, err := workload.Decode(req.Object)
	if err != nil {
		return admission.Response{Code: http.StatusBadRequest, Reason: ReasonMalformed, Message: "runai-webhook: " + err.Error()}
	}
	var old *workload.Pod
	if req.Operation == "UPDATE" {
		if old, err = workload.Decode(req.OldObject); err != nil {
			return admission.Response{Code: http.StatusBadRequest, Reason: ReasonMalformed, Message: "runai-webhook: old object: " + err.Error()}
		}
	}
	ns, found, err := g.Namespaces.Get(ctx, req.Namespace)
	if err != nil {
		return admission.Response{Code: http.StatusServiceUnavailable, Reason: "namespace_unreadable",
			Message: fmt.Sprintf("runai-webhook could not read namespace %s: %v; retry", req.Namespace, err)}
	}
	if !found || !g.Keys.Managed(ns) {
		return admission.Allow()
	}
	project := g.Keys.BoundProject(ns)
	if project == "" {
		// The bind webhook owns unbound namespaces; the API server saw a
		// label that is gone now. Nothing to guard against yet.
		return admission.Allow()
	}
	return g.Check(ctx, pod, old, ns, req.UID, req.IsDryRun())
}

// Check runs every rule on a pod in bound namespace ns. The bind webhook calls
// it on the pod it is about to admit, so the first pod of a namespace meets
// the same rules as the rest even though the API server chose the webhooks
// before the namespace was bound.
func (g *PodGuard) Check(ctx context.Context, pod, old *workload.Pod, ns nsview.Namespace, admissionID string, dryRun bool) admission.Response {
	project := g.Keys.BoundProject(ns)
	gpus, err := pod.GPURequest()
	if err != nil {
		return admission.Deny(ReasonBadGPURequest, fmt.Sprintf("pod %s: %v", pod.DisplayName(), err))
	}
	if v := DecidePodLabels(pod, old, ns, project, gpus, g.Rules); !v.Allowed {
		return admission.Deny(v.Reason, v.Message)
	}
	if old != nil || !gpus.Any() || !pod.NonPreemptible() {
		return admission.Allow()
	}
	key := pod.Metadata.Annotations[mutate.ReservationAnnotation]
	if key == "" {
		key = admissionID
	}
	res := g.Quota.Check(ctx, quota.Request{
		Namespace: ns.Name, Project: project, ProjectID: g.Keys.OwnedProjectID(ns),
		Asks: gpus.Total(), Key: key, DryRun: dryRun,
	})
	if !res.Checked {
		return admission.Allow(res.Warning)
	}
	if !res.Decision.Fits {
		return admission.Deny(ReasonOverQuota, res.Decision.Message)
	}
	if dryRun {
		return admission.Allow(fmt.Sprintf("runai-webhook: fits in Run:ai project %s's GPU quota (%s of %s GPUs left, this pod asks for %s)",
			project, quota.Format(res.Decision.Left), quota.Format(res.Quota.Deserved), quota.Format(gpus.Total())))
	}
	return admission.Allow()
}
