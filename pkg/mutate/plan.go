// Package mutate puts pods in Run:ai namespaces into their project's queue:
// the inject webhook (bound namespaces, no remote call) and the bind webhook
// (first pod of an unbound namespace, binds it through the binder). Each
// handler is decode -> decide (Plan, a pure function) -> patch.
package mutate

import (
	"fmt"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// DefaultScheduler is what the API server writes into an empty schedulerName
// before webhooks run, so a pod that names it chose nothing: we replace it.
// Any other scheduler is an explicit choice we leave for the guard to judge.
const DefaultScheduler = "default-scheduler"

// ReservationAnnotation carries the admission id under which the quota guard
// reserved a non-preemptible pod's GPUs, so the reservation is matched to the
// pod once the pod cache sees it (no double counting, no early release).
const ReservationAnnotation = "runai-webhook.hopsworks.ai/admission-id"

// Settings are the names a plan writes.
type Settings struct {
	QueueLabelKey string
	SchedulerName string
}

// Plan returns the JSON-patch operations that put pod into project's queue:
// the queue label when absent, the Run:ai scheduler when none was chosen, and
// the reservation id of a non-preemptible GPU pod. It never overwrites a
// queue label or scheduler the pod chose: the guard refuses those with a
// message, rather than silently moving a workload. Plan is idempotent: a pod
// it already planned yields no operations (reinvocationPolicy IfNeeded).
func Plan(pod *workload.Pod, project, admissionID string, s Settings) []admission.PatchOp {
	var ops []admission.PatchOp
	if _, ok := pod.Metadata.Labels[s.QueueLabelKey]; !ok {
		if pod.Metadata.Labels == nil {
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{s.QueueLabelKey: project}})
		} else {
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/labels/" + admission.EscapePointer(s.QueueLabelKey), Value: project})
		}
	}
	if sn := pod.Spec.SchedulerName; sn == "" || sn == DefaultScheduler {
		ops = append(ops, admission.PatchOp{Op: "add", Path: "/spec/schedulerName", Value: s.SchedulerName})
	}
	if admissionID != "" && pod.NonPreemptible() {
		if g, err := pod.GPURequest(); err == nil && g.Any() {
			if _, ok := pod.Metadata.Annotations[ReservationAnnotation]; !ok {
				if pod.Metadata.Annotations == nil {
					ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{ReservationAnnotation: admissionID}})
				} else {
					ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/annotations/" + admission.EscapePointer(ReservationAnnotation), Value: admissionID})
				}
			}
		}
	}
	return ops
}

// Apply returns a copy of pod as it looks after Plan's operations, so the
// bind webhook can run the guard's checks on the pod it is about to admit.
func Apply(pod *workload.Pod, project, admissionID string, s Settings) *workload.Pod {
	out := *pod
	out.Metadata.Labels = make(map[string]string, len(pod.Metadata.Labels)+1)
	for k, v := range pod.Metadata.Labels {
		out.Metadata.Labels[k] = v
	}
	if _, ok := out.Metadata.Labels[s.QueueLabelKey]; !ok {
		out.Metadata.Labels[s.QueueLabelKey] = project
	}
	if sn := out.Spec.SchedulerName; sn == "" || sn == DefaultScheduler {
		out.Spec.SchedulerName = s.SchedulerName
	}
	if admissionID != "" {
		out.Metadata.Annotations = make(map[string]string, len(pod.Metadata.Annotations)+1)
		for k, v := range pod.Metadata.Annotations {
			out.Metadata.Annotations[k] = v
		}
		if _, ok := out.Metadata.Annotations[ReservationAnnotation]; !ok && out.NonPreemptible() {
			out.Metadata.Annotations[ReservationAnnotation] = admissionID
		}
	}
	return &out
}

// describe says in words what ops do, for dry-run warnings.
func describe(ops []admission.PatchOp, project string, s Settings) string {
	if len(ops) == 0 {
		return fmt.Sprintf("pod already in Run:ai project %s's queue", project)
	}
	return fmt.Sprintf("pod would be queued in Run:ai project %s (%s=%s, schedulerName %s)", project, s.QueueLabelKey, project, s.SchedulerName)
}
