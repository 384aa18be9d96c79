package validate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

var (
	keys  = nsview.Keys{Queue: "runai/queue", Project: "hopsworks.ai/project", Department: "hopsworks.ai/department"}
	rules = PodRules{QueueLabelKey: "runai/queue", SchedulerName: "runai-scheduler"}
	nsA   = nsview.Namespace{Name: "team-a", Labels: map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a"}}
)

func decode(t testing.TB, raw string) *workload.Pod {
	t.Helper()
	p, err := workload.Decode([]byte(raw))
	require.NoError(t, err)
	return p
}

func TestDecidePodLabels(t *testing.T) {
	tests := []struct {
		name   string
		pod    string
		old    string // "" = CREATE
		reason string // "" = allowed
		msg    []string
	}{
		{name: "queued CPU pod",
			pod: `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`},
		{name: "queued GPU pod on the Run:ai scheduler",
			pod: `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`},
		{name: "Kueue label is refused first, before a foreign queue and a foreign scheduler",
			pod:    `{"metadata":{"name":"p","labels":{"kueue.x-k8s.io/queue-name":"lq","runai/queue":"team-b"}},"spec":{"schedulerName":"volcano","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
			reason: ReasonKueueLabel, msg: []string{"pod p", "kueue.x-k8s.io/queue-name=lq", "namespace team-a", "project team-a", "remove the label"}},
		{name: "Kueue label is refused before a missing queue",
			pod:    `{"metadata":{"generateName":"job-","labels":{"kueue.x-k8s.io/queue-name":""}},"spec":{"containers":[{"name":"c"}]}}`,
			reason: ReasonKueueLabel, msg: []string{"pod job-*", "remove the label"}},
		{name: "Kueue label added on UPDATE is refused",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a","kueue.x-k8s.io/queue-name":"lq"}},"spec":{"containers":[{"name":"c"}]}}`,
			old:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"containers":[{"name":"c"}]}}`,
			reason: ReasonKueueLabel, msg: []string{"remove the label"}},
		{name: "missing queue label",
			pod:    `{"metadata":{"name":"p"},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`,
			reason: ReasonMissingQueue, msg: []string{"pod p has no runai/queue label", "namespace team-a", "retry", "inject webhook"}},
		{name: "foreign queue",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-b"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`,
			reason: ReasonForeignQueue, msg: []string{"runai/queue=team-b", "belongs to Run:ai project team-a", "remove the label", "set runai/queue=team-a"}},
		{name: "empty queue value is a foreign queue",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":""}},"spec":{"containers":[{"name":"c"}]}}`,
			reason: ReasonForeignQueue, msg: []string{"set runai/queue=team-a"}},
		{name: "foreign queue on a CPU pod too (quota escape by label)",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-b"}},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"c"}]}}`,
			reason: ReasonForeignQueue},
		{name: "queue change on UPDATE",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-b"}},"spec":{"containers":[{"name":"c"}]}}`,
			old:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"containers":[{"name":"c"}]}}`,
			reason: ReasonQueueChanged, msg: []string{"label runai/queue cannot change", `was "team-a", now "team-b"`}},
		{name: "queue removed on UPDATE",
			pod:    `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`,
			old:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"containers":[{"name":"c"}]}}`,
			reason: ReasonQueueChanged, msg: []string{"runai/queue cannot change", `now ""`}},
		{name: "queue added on UPDATE of a pod from before the binding",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"containers":[{"name":"c"}]}}`,
			old:    `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`,
			reason: ReasonQueueChanged},
		{name: "UPDATE keeping the queue passes, whatever the scheduler",
			pod: `{"metadata":{"name":"p","labels":{"runai/queue":"team-a","x":"y"}},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
			old: `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`},
		{name: "UPDATE of a pod from before the binding, still unqueued, passes",
			pod: `{"metadata":{"name":"p","labels":{"x":"y"}},"spec":{"containers":[{"name":"c"}]}}`,
			old: `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`},
		{name: "GPU pod with default-scheduler",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
			reason: ReasonGPUScheduler, msg: []string{`schedulerName "default-scheduler"`, "must use runai-scheduler", "remove schedulerName", "set it to runai-scheduler"}},
		{name: "GPU pod with a custom scheduler",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","containers":[{"name":"c","resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}`,
			reason: ReasonGPUScheduler, msg: []string{`schedulerName "volcano"`, "set it to runai-scheduler"}},
		{name: "GPU pod with no scheduler (inject webhook missed it)",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
			reason: ReasonGPUScheduler, msg: []string{`schedulerName ""`}},
		{name: "non-GPU pod with a custom scheduler is allowed",
			pod: `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","containers":[{"name":"c","resources":{"limits":{"cpu":"4","memory":"1Gi"}}}]}}`},
		{name: "a GPU fraction counts as GPUs",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"},"annotations":{"gpu-fraction":"0.25"}},"spec":{"schedulerName":"volcano","containers":[{"name":"c"}]}}`,
			reason: ReasonGPUScheduler},
		{name: "GPUs in the second container count",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","containers":[{"name":"a"},{"name":"b","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
			reason: ReasonGPUScheduler},
		{name: "GPUs in an init container count",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","initContainers":[{"name":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}}],"containers":[{"name":"a"}]}}`,
			reason: ReasonGPUScheduler},
		{name: "GPUs in a sidecar count",
			pod:    `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","initContainers":[{"name":"s","restartPolicy":"Always","resources":{"requests":{"nvidia.com/gpu":"1"}}}],"containers":[{"name":"a"}]}}`,
			reason: ReasonGPUScheduler},
		{name: "zero GPUs is no GPUs",
			pod: `{"metadata":{"name":"p","labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpu":"0"}}}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := decode(t, tt.pod)
			var old *workload.Pod
			if tt.old != "" {
				old = decode(t, tt.old)
			}
			gpus, err := pod.GPURequest()
			require.NoError(t, err)
			v := DecidePodLabels(pod, old, nsA, "team-a", gpus, rules)
			if tt.reason == "" {
				assert.True(t, v.Allowed, v.Message)
				assert.Empty(t, v.Reason)
				assert.Empty(t, v.Message)
				return
			}
			assert.False(t, v.Allowed)
			assert.Equal(t, tt.reason, v.Reason)
			for _, m := range tt.msg {
				assert.Contains(t, v.Message, m)
			}
		})
	}
}
