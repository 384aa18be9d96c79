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
	q, sched, resv := needsQueue(pod, s), needsScheduler(pod), needsReservation(pod, admissionID)
	if !q && !sched && !resv {
		return nil
	}
	ops := make([]admission.PatchOp, 0, 3)
	if q {
		if pod.Metadata.Labels == nil {
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{s.QueueLabelKey: project}})
		} else {
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/labels/" + admission.EscapePointer(s.QueueLabelKey), Value: project})
		}
	}
	if sched {
		ops = append(ops, admission.PatchOp{Op: "add", Path: "/spec/schedulerName", Value: s.SchedulerName})
	}
	if resv {
		if pod.Metadata.Annotations == nil {
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{ReservationAnnotation: admissionID}})
		} else {
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/annotations/" + admission.EscapePointer(ReservationAnnotation), Value: admissionID})
		}
	}
	return ops
}

// Apply returns a copy of pod as it looks after Plan's operations, so the
// bind webhook can run the guard's checks on the pod it is about to admit.
// It makes exactly Plan's changes: pod is not modified, and maps Plan would
// not touch are shared with pod.
func Apply(pod *workload.Pod, project, admissionID string, s Settings) *workload.Pod {
	out := *pod
	if needsQueue(pod, s) {
		out.Metadata.Labels = withLabel(pod.Metadata.Labels, s.QueueLabelKey, project)
	}
	if needsScheduler(pod) {
		out.Spec.SchedulerName = s.SchedulerName
	}
	if needsReservation(pod, admissionID) {
		out.Metadata.Annotations = withLabel(pod.Metadata.Annotations, ReservationAnnotation, admissionID)
	}
	return &out
}

// needsQueue: the pod has no queue label. One it chose is never overwritten.
func needsQueue(pod *workload.Pod, s Settings) bool {
	_, ok := pod.Metadata.Labels[s.QueueLabelKey]
	return !ok
}

// needsScheduler: the pod chose no scheduler (or the API server's default).
func needsScheduler(pod *workload.Pod) bool {
	sn := pod.Spec.SchedulerName
	return sn == "" || sn == DefaultScheduler
}

// needsReservation: a non-preemptible pod that asks for GPUs and carries no
// reservation id yet. A malformed GPU request gets none: the guard refuses it.
func needsReservation(pod *workload.Pod, admissionID string) bool {
	if admissionID == "" || !pod.NonPreemptible() {
		return false
	}
	if _, ok := pod.Metadata.Annotations[ReservationAnnotation]; ok {
		return false
	}
	g, err := pod.GPURequest()
	return err == nil && g.Any()
}

// describe says in words what ops do, for dry-run warnings.
func describe(ops []admission.PatchOp, project string, s Settings) string {
	if len(ops) == 0 {
		return fmt.Sprintf("pod already in Run:ai project %s's queue", project)
	}
	return fmt.Sprintf("pod would be queued in Run:ai project %s (%s=%s, schedulerName %s)", project, s.QueueLabelKey, project, s.SchedulerName)
}
