package mutate

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

var settings = Settings{QueueLabelKey: "runai/queue", SchedulerName: "runai-scheduler"}

const (
	labelsPath = "/metadata/labels"
	queuePath  = "/metadata/labels/runai~1queue"
	schedPath  = "/spec/schedulerName"
	annPath    = "/metadata/annotations"
	resvPath   = "/metadata/annotations/runai-webhook.hopsworks.ai~1admission-id"
)

func op(path string, v any) admission.PatchOp {
	return admission.PatchOp{Op: "add", Path: path, Value: v}
}

// planCases are raw pods (as the API server sends them) and the operations
// Plan must return for project team-a and admission id uid-1.
var planCases = []struct {
	name, pod string
	id        string // admission id; "" = none
	s         *Settings
	want      []admission.PatchOp
}{
	{name: "no labels: the whole map is added",
		pod:  `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(labelsPath, map[string]string{"runai/queue": "team-a"}), op(schedPath, "runai-scheduler")}},
	{name: "null labels: the whole map is added",
		pod:  `{"metadata":{"name":"p","labels":null},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(labelsPath, map[string]string{"runai/queue": "team-a"}), op(schedPath, "runai-scheduler")}},
	{name: "empty labels: the key is added, escaped",
		pod:  `{"metadata":{"name":"p","labels":{}},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}},
	{name: "other labels kept: the key is added",
		pod:  `{"metadata":{"name":"p","labels":{"app":"x","hopsworks.ai/workload-type":"job"}},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}},
	{name: "own queue already set",
		pod:  `{"metadata":{"labels":{"runai/queue":"team-a"}},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(schedPath, "runai-scheduler")}},
	{name: "foreign queue is never overwritten",
		pod:  `{"metadata":{"labels":{"runai/queue":"team-b"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`,
		want: nil},
	{name: "empty queue value is never overwritten",
		pod:  `{"metadata":{"labels":{"runai/queue":""}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`,
		want: nil},
	{name: "default-scheduler is replaced",
		pod:  `{"metadata":{"labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(schedPath, "runai-scheduler")}},
	{name: "empty scheduler is set",
		pod:  `{"metadata":{"labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"","containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(schedPath, "runai-scheduler")}},
	{name: "custom scheduler is left for the guard",
		pod:  `{"metadata":{"labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"volcano","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		want: nil},
	{name: "Run:ai scheduler kept",
		pod:  `{"metadata":{"labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`,
		want: nil},
	{name: "GPU notebook without annotations gets the reservation map", id: "uid-1",
		pod: `{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler"),
			op(annPath, map[string]string{ReservationAnnotation: "uid-1"})}},
	{name: "GPU notebook with annotations gets the reservation key", id: "uid-1",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook"},"annotations":{"x":"y"}},"spec":{"containers":[{"name":"c","resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler"), op(resvPath, "uid-1")}},
	{name: "fractional GPU app gets the reservation key", id: "uid-1",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"app"},"annotations":{"gpu-fraction":"0.5"}},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler"), op(resvPath, "uid-1")}},
	{name: "opted-in non-preemptible job gets the reservation", id: "uid-1",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"job","kai.scheduler/preemptibility":"non-preemptible"},"annotations":{}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler"), op(resvPath, "uid-1")}},
	{name: "existing reservation is kept", id: "uid-2",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook","runai/queue":"team-a"},"annotations":{"runai-webhook.hopsworks.ai/admission-id":"uid-1"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		want: nil},
	{name: "GPU job gets no reservation (preemptible)", id: "uid-1",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"job"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}},
	{name: "CPU notebook gets no reservation", id: "uid-1",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"2"}}}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}},
	{name: "no admission id: no reservation", id: "",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}},
	{name: "malformed GPU request: no reservation (the guard refuses it)", id: "uid-1",
		pod:  `{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook"},"annotations":{"gpu-fraction":"lots"}},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}},
	{name: "label key with ~ and / is escaped", s: &Settings{QueueLabelKey: "a~b/c", SchedulerName: "s"},
		pod:  `{"metadata":{"labels":{"x":"y"}},"spec":{"containers":[{"name":"c"}]}}`,
		want: []admission.PatchOp{op("/metadata/labels/a~0b~1c", "team-a"), op(schedPath, "s")}},
}

func decodePod(t testing.TB, raw string) *workload.Pod {
	t.Helper()
	p, err := workload.Decode([]byte(raw))
	require.NoError(t, err)
	return p
}

func applyPatch(t testing.TB, raw []byte, ops []admission.PatchOp) []byte {
	t.Helper()
	if len(ops) == 0 {
		return raw
	}
	b, err := json.Marshal(ops)
	require.NoError(t, err)
	patch, err := jsonpatch.DecodePatch(b)
	require.NoError(t, err)
	out, err := patch.Apply(raw)
	require.NoError(t, err, "patch %s", b)
	return out
}

func TestPlan(t *testing.T) {
	for _, tt := range planCases {
		t.Run(tt.name, func(t *testing.T) {
			s := settings
			if tt.s != nil {
				s = *tt.s
			}
			pod := decodePod(t, tt.pod)
			before := *pod
			ops := Plan(pod, "team-a", tt.id, s)
			assert.Equal(t, tt.want, ops)
			assert.Equal(t, before, *pod, "Plan must not modify the pod")
		})
	}
}

// TestPlanIsIdempotent applies Plan's patch to the raw pod the way the API
// server does, then plans again: a planned pod needs nothing more, so a
// reinvocation (reinvocationPolicy IfNeeded) changes nothing.
func TestPlanIsIdempotent(t *testing.T) {
	for _, tt := range planCases {
		t.Run(tt.name, func(t *testing.T) {
			s := settings
			if tt.s != nil {
				s = *tt.s
			}
			ops := Plan(decodePod(t, tt.pod), "team-a", tt.id, s)
			patched := applyPatch(t, []byte(tt.pod), ops)
			again := decodePod(t, string(patched))
			assert.Empty(t, Plan(again, "team-a", tt.id, s), "second plan on %s", patched)
			if tt.id != "" {
				assert.Empty(t, Plan(again, "team-a", "another-uid", s), "a reinvocation under another id")
			}
			if len(ops) > 0 {
				// What the patch wrote is what was asked for.
				_, hasQueue := again.Metadata.Labels[s.QueueLabelKey]
				assert.True(t, hasQueue)
			}
		})
	}
}

// TestApplyMatchesPlan: Apply's pod is the pod the API server gets by
// applying Plan's patch, and the input pod is left alone.
func TestApplyMatchesPlan(t *testing.T) {
	for _, tt := range planCases {
		t.Run(tt.name, func(t *testing.T) {
			s := settings
			if tt.s != nil {
				s = *tt.s
			}
			pod := decodePod(t, tt.pod)
			pristine := decodePod(t, tt.pod)
			ops := Plan(pod, "team-a", tt.id, s)
			want := decodePod(t, string(applyPatch(t, []byte(tt.pod), ops)))
			got := Apply(pod, "team-a", tt.id, s)
			assert.Equal(t, want, got)
			assert.Equal(t, pristine, pod, "Apply must not modify its input")
			assert.Empty(t, Plan(got, "team-a", tt.id, s), "Apply's pod needs no more operations")
		})
	}
}

func TestDescribe(t *testing.T) {
	assert.Equal(t, "pod already in Run:ai project team-a's queue", describe(nil, "team-a", settings))
	assert.Equal(t, "pod would be queued in Run:ai project team-a (runai/queue=team-a, schedulerName runai-scheduler)",
		describe([]admission.PatchOp{op(queuePath, "team-a")}, "team-a", settings))
}
