package validate

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/quota"
)

// fakeNamespaces is an in-memory nsview.Getter.
type fakeNamespaces struct {
	ns  map[string]nsview.Namespace
	err error
}

func (f fakeNamespaces) Get(_ context.Context, name string) (nsview.Namespace, bool, error) {
	if f.err != nil {
		return nsview.Namespace{}, false, f.err
	}
	ns, ok := f.ns[name]
	return ns, ok, nil
}

var guardNS = fakeNamespaces{ns: map[string]nsview.Namespace{
	"team-a": {Name: "team-a", Labels: map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a", nsview.ProjectIDLabel: "4711"}},
	"team-b": {Name: "team-b", Labels: map[string]string{"hopsworks.ai/project": "team-b"}},
	"other":  {Name: "other", Labels: map[string]string{"runai/queue": "team-a"}},
}}

// countingQuota is a QuotaChecker that records requests.
type countingQuota struct {
	mu    sync.Mutex
	reqs  []quota.Request
	reply quota.Result
}

func (c *countingQuota) Check(_ context.Context, r quota.Request) quota.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r)
	return c.reply
}

// fakeSource is a quota.Source with a fixed quota or error.
type fakeSource struct {
	q   quota.ProjectQuota
	err error
}

func (f *fakeSource) ProjectQuota(context.Context, string, string, string, bool) (quota.ProjectQuota, error) {
	return f.q, f.err
}

// fakePods is a quota.Pods with fixed held pods.
type fakePods []quota.HeldPod

func (f fakePods) HeldNonPreemptible(string) []quota.HeldPod { return f }

func tracker(deserved float64, held ...float64) *quota.Tracker {
	var pods fakePods
	for _, h := range held {
		pods = append(pods, quota.HeldPod{GPUs: h})
	}
	return &quota.Tracker{
		Source:     &fakeSource{q: quota.ProjectQuota{Project: "team-a", Deserved: deserved, ReadAt: time.Now()}},
		Pods:       pods,
		MaxAge:     time.Minute,
		ReserveFor: time.Minute,
	}
}

func guardWith(q QuotaChecker) *PodGuard {
	return &PodGuard{Rules: rules, Keys: keys, Namespaces: guardNS, Quota: q, Enabled: true}
}

func podReq(op, ns, pod, old string, dryRun bool) *admission.Request {
	r := &admission.Request{UID: "uid-1", Operation: op, Namespace: ns, Object: []byte(pod), DryRun: &dryRun}
	if old != "" {
		r.OldObject = []byte(old)
	}
	return r
}

// Pods as the guard sees them: already mutated by the inject webhook.
const (
	gNotebook1  = `{"metadata":{"name":"nb","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"notebook"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`
	gNotebook2  = `{"metadata":{"name":"nb","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"notebook"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}`
	gJob1       = `{"metadata":{"name":"job","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"job"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`
	gRay1       = `{"metadata":{"name":"ray","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"ray"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`
	gNPJob1     = `{"metadata":{"name":"job","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"job","kai.scheduler/preemptibility":"non-preemptible"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`
	gCPU        = `{"metadata":{"name":"cpu","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"notebook"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`
	gBadFrac    = `{"metadata":{"name":"nb","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"notebook"},"annotations":{"gpu-fraction":"2"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`
	gReserved   = `{"metadata":{"name":"nb","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"terminal"},"annotations":{"runai-webhook.hopsworks.ai/admission-id":"inject-uid"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`
	gFraction   = `{"metadata":{"name":"app","labels":{"runai/queue":"team-a","hopsworks.ai/workload-type":"app"},"annotations":{"gpu-fraction":"0.5","gpu-fraction-num-devices":"3"}},"spec":{"schedulerName":"runai-scheduler","containers":[{"name":"c"}]}}`
	gForeign    = `{"metadata":{"name":"nb","labels":{"runai/queue":"team-b"}},"spec":{"containers":[{"name":"c"}]}}`
	overQuota1  = "project team-a has 0.5 of 2 GPUs left for notebooks, terminals, apps and deployments; this pod asks for 1"
	unreachable = "Run:ai could not be read"
)

func TestPodGuardHandle(t *testing.T) {
	tests := []struct {
		name     string
		guard    *PodGuard
		req      *admission.Request
		allowed  bool
		code     int32
		reason   string
		msg      string
		warnings []string
		warnHas  string
	}{
		{name: "disabled: everything passes", guard: &PodGuard{Rules: rules, Keys: keys, Namespaces: guardNS, Quota: tracker(0)},
			req: podReq("CREATE", "team-a", gForeign, "", false), allowed: true},
		{name: "DELETE passes", guard: guardWith(tracker(0)), req: podReq("DELETE", "team-a", gForeign, "", false), allowed: true},
		{name: "unmanaged namespace passes", guard: guardWith(tracker(0)), req: podReq("CREATE", "other", gForeign, "", false), allowed: true},
		{name: "unknown namespace passes", guard: guardWith(tracker(0)), req: podReq("CREATE", "gone", gForeign, "", false), allowed: true},
		{name: "unbound namespace passes (the bind webhook's)", guard: guardWith(tracker(0)), req: podReq("CREATE", "team-b", gForeign, "", false), allowed: true},
		{name: "namespace read error: 503 (Fail policy)", guard: &PodGuard{Rules: rules, Keys: keys, Namespaces: fakeNamespaces{err: errors.New("cache down")}, Quota: tracker(0), Enabled: true},
			req: podReq("CREATE", "team-a", gNotebook1, "", false), code: http.StatusServiceUnavailable, reason: "namespace_unreadable", msg: "could not read namespace team-a: cache down; retry"},
		{name: "malformed pod: 400", guard: guardWith(tracker(0)), req: podReq("CREATE", "team-a", `{"spec":{"containers":{}}}`, "", false),
			code: http.StatusBadRequest, reason: ReasonMalformed, msg: "decoding pod"},
		{name: "malformed old pod: 400", guard: guardWith(tracker(0)), req: podReq("UPDATE", "team-a", gCPU, `nope`, false),
			code: http.StatusBadRequest, reason: ReasonMalformed, msg: "old object"},
		{name: "label rule refusal", guard: guardWith(tracker(0)), req: podReq("CREATE", "team-a", gForeign, "", false),
			code: http.StatusForbidden, reason: ReasonForeignQueue, msg: "set runai/queue=team-a"},
		{name: "notebook over quota is refused, naming the GPUs left", guard: guardWith(tracker(2, 1, 0.5)), req: podReq("CREATE", "team-a", gNotebook1, "", false),
			code: http.StatusForbidden, reason: ReasonOverQuota, msg: overQuota1},
		{name: "notebook that fits passes", guard: guardWith(tracker(2, 1)), req: podReq("CREATE", "team-a", gNotebook1, "", false), allowed: true},
		{name: "job of the same size is admitted (jobs are never checked)", guard: guardWith(tracker(2, 1, 0.5)), req: podReq("CREATE", "team-a", gJob1, "", false), allowed: true},
		{name: "ray of the same size is admitted", guard: guardWith(tracker(2, 1, 0.5)), req: podReq("CREATE", "team-a", gRay1, "", false), allowed: true},
		{name: "non-preemptible job is checked", guard: guardWith(tracker(2, 1, 0.5)), req: podReq("CREATE", "team-a", gNPJob1, "", false),
			code: http.StatusForbidden, reason: ReasonOverQuota, msg: overQuota1},
		{name: "CPU notebook is not checked", guard: guardWith(tracker(0)), req: podReq("CREATE", "team-a", gCPU, "", false), allowed: true},
		{name: "fractions are checked: 0.5 x 3 devices", guard: guardWith(tracker(2, 1)), req: podReq("CREATE", "team-a", gFraction, "", false),
			code: http.StatusForbidden, reason: ReasonOverQuota, msg: "has 1 of 2 GPUs left for notebooks, terminals, apps and deployments; this pod asks for 1.5"},
		{name: "UPDATE of a notebook is not checked again", guard: guardWith(tracker(0)), req: podReq("UPDATE", "team-a", gNotebook1, gNotebook1, false), allowed: true},
		{name: "UPDATE moving the queue is refused", guard: guardWith(tracker(0)),
			req:  podReq("UPDATE", "team-a", `{"metadata":{"name":"nb","labels":{"runai/queue":"team-b"}},"spec":{"containers":[]}}`, gCPU, false),
			code: http.StatusForbidden, reason: ReasonQueueChanged},
		{name: "Run:ai unreachable: allowed with a warning", guard: guardWith(&quota.Tracker{Source: &fakeSource{err: errors.New("connection refused")}, Pods: fakePods{}}),
			req: podReq("CREATE", "team-a", gNotebook2, "", false), allowed: true, warnHas: unreachable},
		{name: "bad gpu-fraction is refused", guard: guardWith(tracker(8)), req: podReq("CREATE", "team-a", gBadFrac, "", false),
			code: http.StatusForbidden, reason: ReasonBadGPURequest, msg: `pod nb: annotation gpu-fraction="2" must be a number greater than 0 and at most 1`},
		{name: "dry run that fits says so", guard: guardWith(tracker(2, 0.5)), req: podReq("CREATE", "team-a", gNotebook1, "", true), allowed: true,
			warnings: []string{"runai-webhook: fits in Run:ai project team-a's GPU quota (1.5 of 2 GPUs left, this pod asks for 1)"}},
		{name: "dry run over quota is refused the same way", guard: guardWith(tracker(2, 1, 0.5)), req: podReq("CREATE", "team-a", gNotebook1, "", true),
			code: http.StatusForbidden, reason: ReasonOverQuota, msg: overQuota1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.guard.Handle(context.Background(), tt.req)
			assert.Equal(t, tt.allowed, resp.Allowed, resp.Message)
			if !tt.allowed {
				assert.Equal(t, tt.code, resp.Code)
				assert.Equal(t, tt.reason, resp.Reason)
				assert.Contains(t, resp.Message, tt.msg)
			}
			assert.Nil(t, resp.Patch, "the guard never mutates")
			if tt.warnHas != "" {
				require.Len(t, resp.Warnings, 1)
				assert.Contains(t, resp.Warnings[0], tt.warnHas)
			} else {
				assert.Equal(t, tt.warnings, resp.Warnings)
			}
		})
	}
}

// Jobs, ray workers, CPU pods, updates and refusals by the label rules never
// reach the quota checker (no Run:ai read on those paths).
func TestPodGuardQuotaOnlyForNonPreemptibleGPUCreates(t *testing.T) {
	for _, tt := range []struct {
		name, op, pod, old string
		ns                 string
		checks             int
	}{
		{"gpu job", "CREATE", gJob1, "", "team-a", 0},
		{"gpu ray", "CREATE", gRay1, "", "team-a", 0},
		{"cpu notebook", "CREATE", gCPU, "", "team-a", 0},
		{"update of a gpu notebook", "UPDATE", gNotebook1, gNotebook1, "team-a", 0},
		{"foreign queue", "CREATE", gForeign, "", "team-a", 0},
		{"bad fraction", "CREATE", gBadFrac, "", "team-a", 0},
		{"unbound namespace", "CREATE", gNotebook1, "", "team-b", 0},
		{"gpu notebook", "CREATE", gNotebook1, "", "team-a", 1},
		{"non-preemptible job", "CREATE", gNPJob1, "", "team-a", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := &countingQuota{reply: quota.Result{Checked: true, Decision: quota.Decision{Fits: true}}}
			guardWith(q).Handle(context.Background(), podReq(tt.op, tt.ns, tt.pod, tt.old, false))
			assert.Len(t, q.reqs, tt.checks)
		})
	}
}

func TestPodGuardQuotaRequest(t *testing.T) {
	t.Run("reservation key is the inject webhook's admission id", func(t *testing.T) {
		q := &countingQuota{reply: quota.Result{Checked: true, Decision: quota.Decision{Fits: true}}}
		resp := guardWith(q).Handle(context.Background(), podReq("CREATE", "team-a", gReserved, "", false))
		require.True(t, resp.Allowed)
		require.Len(t, q.reqs, 1)
		assert.Equal(t, quota.Request{Namespace: "team-a", Project: "team-a", ProjectID: "4711", Asks: 1, Key: "inject-uid"}, q.reqs[0])
		assert.Equal(t, "runai-webhook.hopsworks.ai/admission-id", mutate.ReservationAnnotation)
	})
	t.Run("without the annotation the request uid is the key", func(t *testing.T) {
		q := &countingQuota{reply: quota.Result{Checked: true, Decision: quota.Decision{Fits: true}}}
		guardWith(q).Handle(context.Background(), podReq("CREATE", "team-a", gNotebook2, "", false))
		require.Len(t, q.reqs, 1)
		assert.Equal(t, quota.Request{Namespace: "team-a", Project: "team-a", ProjectID: "4711", Asks: 2, Key: "uid-1"}, q.reqs[0])
	})
	t.Run("dry run is passed on", func(t *testing.T) {
		q := &countingQuota{reply: quota.Result{Checked: true, Decision: quota.Decision{Fits: true, Left: 3}, Quota: quota.ProjectQuota{Deserved: 4}}}
		resp := guardWith(q).Handle(context.Background(), podReq("CREATE", "team-a", gNotebook1, "", true))
		require.Len(t, q.reqs, 1)
		assert.True(t, q.reqs[0].DryRun)
		assert.Equal(t, []string{"runai-webhook: fits in Run:ai project team-a's GPU quota (3 of 4 GPUs left, this pod asks for 1)"}, resp.Warnings)
	})
	t.Run("unchecked result: allowed with the tracker's warning", func(t *testing.T) {
		q := &countingQuota{reply: quota.Result{Checked: false, Decision: quota.Decision{Fits: true}, Warning: "not checked"}}
		resp := guardWith(q).Handle(context.Background(), podReq("CREATE", "team-a", gNotebook1, "", false))
		assert.True(t, resp.Allowed)
		assert.Equal(t, []string{"not checked"}, resp.Warnings)
	})
}

// A dry run decides against the real tracker but reserves nothing: the GPUs
// it "took" are still there for the real create, and the real create's
// reservation then counts against the next pod.
func TestPodGuardDryRunReservesNothing(t *testing.T) {
	g := guardWith(tracker(2))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		resp := g.Handle(ctx, podReq("CREATE", "team-a", gNotebook2, "", true))
		require.True(t, resp.Allowed, resp.Message)
	}
	resp := g.Handle(ctx, podReq("CREATE", "team-a", gNotebook2, "", false))
	require.True(t, resp.Allowed, "the dry runs reserved nothing: %s", resp.Message)

	next := podReq("CREATE", "team-a", gNotebook1, "", false)
	next.UID = "uid-2"
	resp = g.Handle(ctx, next)
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Message, "project team-a has 0 of 2 GPUs left")

	// The same admission id (a reinvocation or a retry) is not counted twice.
	resp = g.Handle(ctx, podReq("CREATE", "team-a", gNotebook2, "", false))
	assert.True(t, resp.Allowed, resp.Message)
}
