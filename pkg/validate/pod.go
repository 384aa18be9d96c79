// Package validate holds the guards: the pod guard (a pod cannot leave its
// project's queue, use another scheduler for GPUs, carry a Kueue queue, or
// start a non-preemptible GPU workload over quota) and the namespace guard
// (only the webhook writes binding labels; department changes move the Run:ai
// project first). Decisions are pure functions; handlers do the I/O.
package validate

import (
	"fmt"

	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// Refusal reasons, used as metric labels and in tests.
const (
	ReasonForeignQueue     = "foreign_queue"
	ReasonMissingQueue     = "missing_queue"
	ReasonQueueChanged     = "queue_changed"
	ReasonGPUScheduler     = "gpu_scheduler"
	ReasonKueueLabel       = "kueue_label"
	ReasonOverQuota        = "over_quota"
	ReasonBadGPURequest    = "bad_gpu_request"
	ReasonMalformed        = "malformed"
	ReasonNotBound         = "not_bound"
	ReasonBindingLabels    = "binding_labels"
	ReasonBadDepartment    = "bad_department"
	ReasonMoveRefused      = "move_refused"
	ReasonRunAIUnavailable = "runai_unavailable"
)

// Verdict is a guard's decision before any Run:ai state is read.
type Verdict struct {
	Allowed bool
	Reason  string
	Message string
}

func allow() Verdict { return Verdict{Allowed: true} }

func deny(reason, format string, a ...any) Verdict {
	return Verdict{Reason: reason, Message: fmt.Sprintf(format, a...)}
}

// PodRules are the names the pod rules check against.
type PodRules struct {
	QueueLabelKey string
	SchedulerName string
}

// DecidePodLabels applies the label and scheduler rules to a pod in a bound
// namespace (project is the namespace's Run:ai project). old is the pod before
// an UPDATE, nil on CREATE. The GPU request is passed in already computed.
func DecidePodLabels(pod, old *workload.Pod, ns nsview.Namespace, project string, gpus workload.GPUs, r PodRules) Verdict {
	name := pod.DisplayName()
	if q, ok := pod.Metadata.Labels[workload.KueueQueueLabel]; ok {
		return deny(ReasonKueueLabel,
			"pod %s carries Kueue's label %s=%s, but namespace %s is scheduled by Run:ai (project %s); Kueue and Run:ai are mutually exclusive: remove the label",
			name, workload.KueueQueueLabel, q, ns.Name, project)
	}
	q, ok := pod.Metadata.Labels[r.QueueLabelKey]
	if old != nil {
		if oq := old.Metadata.Labels[r.QueueLabelKey]; oq != q {
			return deny(ReasonQueueChanged, "pod %s: label %s cannot change after creation (was %q, now %q); a pod stays in its project's queue",
				name, r.QueueLabelKey, oq, q)
		}
		return allow()
	}
	switch {
	case !ok:
		return deny(ReasonMissingQueue,
			"pod %s has no %s label, which runai-webhook adds in namespace %s; retry the create, and if it persists check that the runai-webhook inject webhook is running",
			name, r.QueueLabelKey, ns.Name)
	case q != project:
		return deny(ReasonForeignQueue,
			"pod %s has %s=%s, but namespace %s belongs to Run:ai project %s; remove the label (it is set for you) or set %s=%s",
			name, r.QueueLabelKey, q, ns.Name, project, r.QueueLabelKey, project)
	}
	if gpus.Any() && pod.Spec.SchedulerName != r.SchedulerName {
		return deny(ReasonGPUScheduler,
			"pod %s asks for GPUs with schedulerName %q; GPU pods in namespace %s must use %s: remove schedulerName (it is set for you) or set it to %s",
			name, pod.Spec.SchedulerName, ns.Name, r.SchedulerName, r.SchedulerName)
	}
	return allow()
}
