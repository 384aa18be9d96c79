package mutate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

var keys = nsview.Keys{Queue: "runai/queue", Project: "hopsworks.ai/project", Department: "hopsworks.ai/department"}

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

func namespaces(list ...nsview.Namespace) fakeNamespaces {
	m := map[string]nsview.Namespace{}
	for _, ns := range list {
		m[ns.Name] = ns
	}
	return fakeNamespaces{ns: m}
}

var (
	boundNS     = nsview.Namespace{Name: "team-a", Labels: map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a"}}
	unboundNS   = nsview.Namespace{Name: "team-b", Labels: map[string]string{"hopsworks.ai/project": "team-b", "hopsworks.ai/department": "research"}}
	unmanagedNS = nsview.Namespace{Name: "kube-public", Labels: map[string]string{"runai/queue": "whatever"}}
	allNS       = namespaces(boundNS, unboundNS, unmanagedNS)
)

const (
	plainPod    = `{"metadata":{"name":"p","labels":{"app":"x"}},"spec":{"containers":[{"name":"c"}]}}`
	notebookPod = `{"metadata":{"name":"nb","labels":{"hopsworks.ai/workload-type":"notebook"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`
)

func request(op, ns, pod string, dryRun bool) *admission.Request {
	return &admission.Request{UID: "uid-1", Operation: op, Namespace: ns, Object: []byte(pod), DryRun: &dryRun}
}

func TestInjectorHandle(t *testing.T) {
	on := func(g nsview.Getter) *Injector {
		return &Injector{Settings: settings, Keys: keys, Namespaces: g, Enabled: true}
	}
	queued := []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}
	tests := []struct {
		name     string
		inj      *Injector
		req      *admission.Request
		allowed  bool
		code     int32
		patch    []admission.PatchOp
		warnings []string
	}{
		{name: "disabled: untouched", inj: &Injector{Settings: settings, Keys: keys, Namespaces: allNS},
			req: request("CREATE", "team-a", plainPod, false), allowed: true},
		{name: "UPDATE untouched", inj: on(allNS), req: request("UPDATE", "team-a", plainPod, false), allowed: true},
		{name: "DELETE untouched", inj: on(allNS), req: request("DELETE", "team-a", plainPod, false), allowed: true},
		{name: "unmanaged namespace untouched", inj: on(allNS), req: request("CREATE", "kube-public", plainPod, false), allowed: true},
		{name: "unknown namespace untouched", inj: on(allNS), req: request("CREATE", "gone", plainPod, false), allowed: true},
		{name: "unbound namespace is the bind webhook's", inj: on(allNS), req: request("CREATE", "team-b", plainPod, false), allowed: true},
		{name: "namespace read error: allowed (Ignore policy, the guard catches it)", inj: on(fakeNamespaces{err: errors.New("cache down")}),
			req: request("CREATE", "team-a", plainPod, false), allowed: true},
		{name: "bound namespace: queue and scheduler", inj: on(allNS), req: request("CREATE", "team-a", plainPod, false),
			allowed: true, patch: queued},
		{name: "bound namespace, GPU notebook: reservation under the request uid", inj: on(allNS), req: request("CREATE", "team-a", notebookPod, false),
			allowed: true, patch: append(append([]admission.PatchOp{}, queued...), op(annPath, map[string]string{ReservationAnnotation: "uid-1"}))},
		{name: "dry run: the patch and a warning saying what it does", inj: on(allNS), req: request("CREATE", "team-a", plainPod, true),
			allowed: true, patch: queued,
			warnings: []string{"runai-webhook: pod would be queued in Run:ai project team-a (runai/queue=team-a, schedulerName runai-scheduler)"}},
		{name: "dry run of a pod already queued", inj: on(allNS),
			req:     request("CREATE", "team-a", `{"metadata":{"labels":{"runai/queue":"team-a"}},"spec":{"schedulerName":"runai-scheduler","containers":[]}}`, true),
			allowed: true, warnings: []string{"runai-webhook: pod already in Run:ai project team-a's queue"}},
		{name: "malformed object: 400", inj: on(allNS), req: request("CREATE", "team-a", `{"metadata":[]}`, false), code: http.StatusBadRequest},
		{name: "not an object: 400", inj: on(allNS), req: request("CREATE", "team-a", `"pod"`, false), code: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.inj.Handle(context.Background(), tt.req)
			assert.Equal(t, tt.allowed, resp.Allowed, resp.Message)
			assert.Equal(t, tt.code, resp.Code)
			assert.Equal(t, tt.patch, resp.Patch)
			assert.Equal(t, tt.warnings, resp.Warnings)
			if tt.code == http.StatusBadRequest {
				assert.Equal(t, "malformed", resp.Reason)
				assert.Contains(t, resp.Message, "decoding pod")
			}
		})
	}
}

// fakeBinder records calls and answers with a fixed outcome or error.
type fakeBinder struct {
	mu              sync.Mutex
	out             bind.Outcome
	err             error
	binds, previews int
	lastNS          string
}

func (f *fakeBinder) Bind(_ context.Context, ns string) (bind.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.binds++
	f.lastNS = ns
	return f.out, f.err
}

func (f *fakeBinder) Preview(_ context.Context, ns string) (bind.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.previews++
	f.lastNS = ns
	return f.out, f.err
}

// fakeGuard records what the bind webhook asks the pod guard.
type fakeGuard struct {
	resp   admission.Response
	calls  int
	pod    *workload.Pod
	ns     nsview.Namespace
	id     string
	dryRun bool
}

func (g *fakeGuard) Check(_ context.Context, pod, old *workload.Pod, ns nsview.Namespace, id string, dryRun bool) admission.Response {
	g.calls++
	g.pod, g.ns, g.id, g.dryRun = pod, ns, id, dryRun
	if old != nil {
		panic("the bind webhook checks creates only")
	}
	return g.resp
}

func TestBindHookHandle(t *testing.T) {
	created := bind.Outcome{Namespace: "team-b", Project: "team-b", ProjectID: "4711", Department: "research", Ready: true}
	adopted := bind.Outcome{Namespace: "team-b", Project: "team-b", ProjectID: "99", Department: "research", Adopted: true, Ready: true}
	notReady := created
	notReady.Ready = false
	queuedB := []admission.PatchOp{op(queuePath, "team-b"), op(schedPath, "runai-scheduler")}

	type want struct {
		allowed          bool
		code             int32
		reason           string
		msg              []string
		patch            []admission.PatchOp
		warnings         []string
		binds, previews  int
		guardCalls       int
		guardNSLabels    map[string]string
		guardDryRun      bool
		guardSeesQueued  bool
		guardSeesProject string
	}
	tests := []struct {
		name   string
		g      nsview.Getter
		binder *fakeBinder
		guard  admission.Response
		off    bool
		req    *admission.Request
		want   want
	}{
		{name: "disabled", off: true, g: allNS, binder: &fakeBinder{out: created}, req: request("CREATE", "team-b", plainPod, false),
			want: want{allowed: true}},
		{name: "UPDATE is not the bind webhook's", g: allNS, binder: &fakeBinder{out: created}, req: request("UPDATE", "team-b", plainPod, false),
			want: want{allowed: true}},
		{name: "unmanaged namespace", g: allNS, binder: &fakeBinder{out: created}, req: request("CREATE", "kube-public", plainPod, false),
			want: want{allowed: true}},
		{name: "unknown namespace", g: allNS, binder: &fakeBinder{out: created}, req: request("CREATE", "gone", plainPod, false),
			want: want{allowed: true}},
		{name: "namespace read error: 503 (Fail policy)", g: fakeNamespaces{err: errors.New("etcd slow")}, binder: &fakeBinder{out: created},
			req:  request("CREATE", "team-b", plainPod, false),
			want: want{code: http.StatusServiceUnavailable, reason: "namespace_unreadable", msg: []string{"could not read namespace team-b", "etcd slow", "retry"}}},
		{name: "malformed pod: 400", g: allNS, binder: &fakeBinder{out: created}, req: request("CREATE", "team-b", `[`, false),
			want: want{code: http.StatusBadRequest, reason: "malformed", msg: []string{"decoding pod"}}},
		{name: "bind creates the project, pod is queued and checked", g: allNS, binder: &fakeBinder{out: created}, guard: admission.Allow(),
			req: request("CREATE", "team-b", plainPod, false),
			want: want{allowed: true, patch: queuedB, binds: 1, guardCalls: 1, guardSeesQueued: true, guardSeesProject: "team-b",
				guardNSLabels: map[string]string{"hopsworks.ai/project": "team-b", "hopsworks.ai/department": "research", "runai/queue": "team-b", "hopsworks.ai/runai-project-id": "4711"}}},
		{name: "bind adopts the project: no ownership label for the guard", g: allNS, binder: &fakeBinder{out: adopted}, guard: admission.Allow(),
			req: request("CREATE", "team-b", plainPod, false),
			want: want{allowed: true, patch: queuedB, binds: 1, guardCalls: 1, guardSeesQueued: true, guardSeesProject: "team-b",
				guardNSLabels: map[string]string{"hopsworks.ai/project": "team-b", "hopsworks.ai/department": "research", "runai/queue": "team-b"}}},
		{name: "project not Ready yet: admitted with a warning", g: allNS, binder: &fakeBinder{out: notReady}, guard: admission.Allow(),
			req: request("CREATE", "team-b", plainPod, false),
			want: want{allowed: true, patch: queuedB, binds: 1, guardCalls: 1, guardSeesQueued: true, guardSeesProject: "team-b",
				warnings: []string{"runai-webhook: Run:ai project team-b is still being set up; the pod waits in its queue until the project is Ready"}}},
		{name: "guard warnings follow the bind warnings", g: allNS, binder: &fakeBinder{out: notReady}, guard: admission.Allow("guard says hi"),
			req: request("CREATE", "team-b", plainPod, false),
			want: want{allowed: true, patch: queuedB, binds: 1, guardCalls: 1, guardSeesQueued: true, guardSeesProject: "team-b",
				warnings: []string{"runai-webhook: Run:ai project team-b is still being set up; the pod waits in its queue until the project is Ready", "guard says hi"}}},
		{name: "dry run previews, never binds, and says what would happen", g: allNS, binder: &fakeBinder{out: created}, guard: admission.Allow(),
			req: request("CREATE", "team-b", plainPod, true),
			want: want{allowed: true, patch: queuedB, previews: 1, guardCalls: 1, guardDryRun: true, guardSeesQueued: true, guardSeesProject: "team-b",
				warnings: []string{
					"runai-webhook: namespace team-b would be bound to a new Run:ai project team-b in department research",
					"runai-webhook: pod would be queued in Run:ai project team-b (runai/queue=team-b, schedulerName runai-scheduler)"}}},
		{name: "dry run of an adoption", g: allNS, binder: &fakeBinder{out: adopted}, guard: admission.Allow(),
			req: request("CREATE", "team-b", plainPod, true),
			want: want{allowed: true, patch: queuedB, previews: 1, guardCalls: 1, guardDryRun: true, guardSeesQueued: true, guardSeesProject: "team-b",
				warnings: []string{
					"runai-webhook: namespace team-b would be bound to its existing Run:ai project team-b in department research (adopted)",
					"runai-webhook: pod would be queued in Run:ai project team-b (runai/queue=team-b, schedulerName runai-scheduler)"}}},
		{name: "Run:ai unreachable: 503 that says a retry works", g: allNS, binder: &fakeBinder{err: errors.New("dial tcp 10.0.0.1:8080: connection refused")},
			req: request("CREATE", "team-b", plainPod, false),
			want: want{code: http.StatusServiceUnavailable, reason: "not_bound", binds: 1,
				msg: []string{"namespace team-b is not bound to Run:ai yet", "connection refused", "Retry", "outside the project's GPU quota"}}},
		{name: "dry run with Run:ai unreachable: 503 too", g: allNS, binder: &fakeBinder{err: context.DeadlineExceeded},
			req: request("CREATE", "team-b", plainPod, true),
			want: want{code: http.StatusServiceUnavailable, reason: "not_bound", previews: 1,
				msg: []string{"is not bound to Run:ai yet", "Retry"}}},
		{name: "refusal: 403 with its message", g: allNS,
			binder: &fakeBinder{err: &bind.Refusal{Message: "Run:ai project team-b is bound to namespace other"}},
			req:    request("CREATE", "team-b", plainPod, false),
			want: want{code: http.StatusForbidden, reason: "bind_refused", binds: 1,
				msg: []string{"namespace team-b is not bound to Run:ai: Run:ai project team-b is bound to namespace other"}}},
		{name: "wrapped refusal is still a refusal", g: allNS,
			binder: &fakeBinder{err: fmt.Errorf("binding: %w", &bind.Refusal{Message: "department research does not exist"})},
			req:    request("CREATE", "team-b", plainPod, true),
			want:   want{code: http.StatusForbidden, reason: "bind_refused", previews: 1, msg: []string{"department research does not exist"}}},
		{name: "already bound namespace: no bind, pod queued and checked", g: allNS, binder: &fakeBinder{out: created}, guard: admission.Allow(),
			req: request("CREATE", "team-a", plainPod, false),
			want: want{allowed: true, patch: []admission.PatchOp{op(queuePath, "team-a"), op(schedPath, "runai-scheduler")}, guardCalls: 1,
				guardSeesQueued: true, guardSeesProject: "team-a", guardNSLabels: boundNS.Labels}},
		{name: "guard refusal propagates with the bind warnings", g: allNS, binder: &fakeBinder{out: notReady},
			guard: admission.Deny("over_quota", "project team-b has 0 of 0 GPUs left", "guard warning"),
			req:   request("CREATE", "team-b", notebookPod, false),
			want: want{code: http.StatusForbidden, reason: "over_quota", msg: []string{"project team-b has 0 of 0 GPUs left"}, binds: 1, guardCalls: 1,
				guardSeesQueued: true, guardSeesProject: "team-b",
				warnings: []string{"runai-webhook: Run:ai project team-b is still being set up; the pod waits in its queue until the project is Ready", "guard warning"}}},
		{name: "guard refusal in a dry run carries the would-be warnings", g: allNS, binder: &fakeBinder{out: created},
			guard: admission.Deny("gpu_scheduler", "use runai-scheduler"),
			req:   request("CREATE", "team-b", plainPod, true),
			want: want{code: http.StatusForbidden, reason: "gpu_scheduler", msg: []string{"use runai-scheduler"}, previews: 1, guardCalls: 1, guardDryRun: true,
				guardSeesQueued: true, guardSeesProject: "team-b",
				warnings: []string{
					"runai-webhook: namespace team-b would be bound to a new Run:ai project team-b in department research",
					"runai-webhook: pod would be queued in Run:ai project team-b (runai/queue=team-b, schedulerName runai-scheduler)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			guard := &fakeGuard{resp: tt.guard}
			h := &BindHook{Settings: settings, Keys: keys, Namespaces: tt.g, Binder: tt.binder, Guard: guard, Enabled: !tt.off}
			resp := h.Handle(context.Background(), tt.req)
			w := tt.want
			assert.Equal(t, w.allowed, resp.Allowed, resp.Message)
			if w.allowed {
				assert.Empty(t, resp.Message)
			} else {
				assert.Equal(t, w.code, resp.Code)
				assert.Equal(t, w.reason, resp.Reason)
				assert.Nil(t, resp.Patch, "a refusal carries no patch")
			}
			for _, m := range w.msg {
				assert.Contains(t, resp.Message, m)
			}
			assert.Equal(t, w.patch, resp.Patch)
			assert.Equal(t, w.warnings, resp.Warnings)
			assert.Equal(t, w.binds, tt.binder.binds, "Bind calls")
			assert.Equal(t, w.previews, tt.binder.previews, "Preview calls")
			if w.binds+w.previews > 0 {
				assert.Equal(t, tt.req.Namespace, tt.binder.lastNS)
			}
			require.Equal(t, w.guardCalls, guard.calls, "guard calls")
			if guard.calls == 0 {
				return
			}
			assert.Equal(t, w.guardDryRun, guard.dryRun)
			assert.Equal(t, "uid-1", guard.id)
			assert.Equal(t, w.guardSeesProject, keys.BoundProject(guard.ns), "guard sees the namespace bound")
			if w.guardNSLabels != nil {
				assert.Equal(t, w.guardNSLabels, guard.ns.Labels)
			}
			if w.guardSeesQueued {
				assert.Equal(t, w.guardSeesProject, guard.pod.Metadata.Labels["runai/queue"], "guard sees the mutated pod")
				assert.Equal(t, "runai-scheduler", guard.pod.Spec.SchedulerName)
			}
		})
	}
}

// The label map of a namespace read from the cache must not be written to
// when the bind webhook pretends it is bound.
func TestBindHookDoesNotModifyCachedNamespace(t *testing.T) {
	labels := map[string]string{"hopsworks.ai/project": "team-b"}
	g := namespaces(nsview.Namespace{Name: "team-b", Labels: labels})
	h := &BindHook{Settings: settings, Keys: keys, Namespaces: g, Enabled: true,
		Binder: &fakeBinder{out: bind.Outcome{Project: "team-b", ProjectID: "1", Ready: true}}, Guard: &fakeGuard{resp: admission.Allow()}}
	resp := h.Handle(context.Background(), request("CREATE", "team-b", plainPod, false))
	require.True(t, resp.Allowed)
	assert.Equal(t, map[string]string{"hopsworks.ai/project": "team-b"}, labels)
}
