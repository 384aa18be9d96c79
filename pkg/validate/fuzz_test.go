package validate

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/internal/jsontest"
	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// FuzzPodDecisions decodes arbitrary bytes as a pod and runs every pure pod
// decision on it. Nothing may panic, and the decisions must agree:
//   - Plan's patch, applied to the raw pod, yields a pod Plan leaves alone,
//     and that pod is the one Apply returns;
//   - a pod the inject webhook fully planned (no queue, Kueue label or
//     scheduler of its own) passes the label rules afterwards.
func FuzzPodDecisions(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`), "uid-1")
	f.Add([]byte(`{"metadata":{"labels":{"hopsworks.ai/workload-type":"notebook"},"annotations":{"gpu-fraction":"0.5"}},"spec":{"containers":[]}}`), "u")
	f.Add([]byte(`{"metadata":{"labels":{"runai/queue":"x"}},"spec":{"schedulerName":"default-scheduler","initContainers":[{"name":"i","restartPolicy":"Always","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}`), "")
	s := mutate.Settings{QueueLabelKey: rules.QueueLabelKey, SchedulerName: rules.SchedulerName}
	f.Fuzz(func(t *testing.T, raw []byte, uid string) {
		pod, err := workload.Decode(raw)
		if err != nil {
			return
		}
		gpus, gerr := pod.GPURequest()
		if gerr == nil {
			if gpus.Whole < 0 || gpus.Fraction < 0 || math.IsNaN(gpus.Total()) || math.IsInf(gpus.Total(), 0) {
				t.Fatalf("impossible demand %+v", gpus)
			}
		}
		_ = pod.NonPreemptible()
		_ = pod.DisplayName()
		_ = DecidePodLabels(pod, nil, nsA, "team-a", gpus, rules)
		_ = DecidePodLabels(pod, pod, nsA, "team-a", gpus, rules)

		ops := mutate.Plan(pod, "team-a", uid, s)
		applied := mutate.Apply(pod, "team-a", uid, s)
		if len(mutate.Plan(applied, "team-a", uid, s)) != 0 {
			t.Fatalf("Apply's pod still needs operations")
		}
		if _, ok := applied.Metadata.Labels[s.QueueLabelKey]; !ok {
			t.Fatalf("Apply left the pod without a queue")
		}
		if gerr == nil && !hasKey(pod.Metadata.Labels, s.QueueLabelKey) && !hasKey(pod.Metadata.Labels, workload.KueueQueueLabel) &&
			(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == mutate.DefaultScheduler) {
			if v := DecidePodLabels(applied, nil, nsA, "team-a", gpus, rules); !v.Allowed {
				t.Fatalf("the guard refuses what the inject webhook made: %s", v.Message)
			}
		}

		// Apply the patch as the API server would. Raw input the API server
		// never sends (duplicate keys, a missing metadata object) may not
		// take the patch; skip those.
		if len(ops) == 0 || !jsontest.Canonical(raw) {
			return
		}
		b, err := json.Marshal(ops)
		if err != nil {
			t.Fatalf("marshaling ops: %v", err)
		}
		patch, err := jsonpatch.DecodePatch(b)
		if err != nil {
			t.Fatalf("our patch does not parse: %v", err)
		}
		out, err := patch.Apply(raw)
		if err != nil {
			return
		}
		again, err := workload.Decode(out)
		if err != nil {
			t.Fatalf("patched pod does not decode: %v\n%s", err, out)
		}
		if more := mutate.Plan(again, "team-a", uid, s); len(more) != 0 {
			t.Fatalf("not idempotent: %+v after %s", more, out)
		}
	})
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// FuzzDecideNamespaceLabels builds namespace label maps from fuzz strings
// (presence bits choose which keys exist before and after) and checks the
// namespace rules: a user other than the writers never gets a binding label
// added, changed or removed, a refusal names the label, and an admitted
// department label follows the naming rule.
func FuzzDecideNamespaceLabels(f *testing.F) {
	f.Add("alice", "team-a", "team-a", "1", "1", "research", "finance", uint8(0xff))
	f.Add(webhookUser, "team-a", "", "", "", "", "", uint8(0x01))
	f.Add("system:serviceaccount:runai:x", "q", "", "", "", "BAD", "", uint8(0x11))
	f.Add("bob", "", "", "", "", strings.Repeat("a", 64), "", uint8(0x10))
	f.Fuzz(func(t *testing.T, user, nq, oq, nid, oid, nd, od string, present uint8) {
		ns, old := map[string]string{"hopsworks.ai/project": "p"}, map[string]string{"hopsworks.ai/project": "p"}
		set := func(m map[string]string, bit uint8, k, v string) {
			if present&bit != 0 {
				m[k] = v
			}
		}
		set(ns, 0x01, keys.Queue, nq)
		set(ns, 0x02, nsview.ProjectIDLabel, nid)
		set(ns, 0x04, keys.Department, nd)
		set(old, 0x10, keys.Queue, oq)
		set(old, 0x20, nsview.ProjectIDLabel, oid)
		set(old, 0x40, keys.Department, od)
		if present&0x80 != 0 {
			old = nil // CREATE
		}
		v := DecideNamespaceLabels(keys, writers, user, ns, old)
		if writers.Allowed(user) {
			if !v.Allowed {
				t.Fatalf("a writer was refused: %s", v.Message)
			}
			return
		}
		if v.Allowed {
			for _, k := range []string{keys.Queue, nsview.ProjectIDLabel} {
				nv, nok := ns[k]
				ov, ook := old[k]
				if nok != ook || nv != ov {
					t.Fatalf("user %q changed %s: %q(%v) -> %q(%v)", user, k, ov, ook, nv, nok)
				}
			}
			if d := ns[keys.Department]; d != "" && !config.ValidDepartmentName(d) {
				t.Fatalf("bad department %q admitted", d)
			}
			return
		}
		switch v.Reason {
		case ReasonBindingLabels:
			if !strings.Contains(v.Message, keys.Queue) || !strings.Contains(v.Message, nsview.ProjectIDLabel) {
				t.Fatalf("refusal does not name the labels: %s", v.Message)
			}
		case ReasonBadDepartment:
			if !strings.Contains(v.Message, keys.Department) {
				t.Fatalf("refusal does not name the label: %s", v.Message)
			}
		default:
			t.Fatalf("unexpected reason %q", v.Reason)
		}
	})
}
