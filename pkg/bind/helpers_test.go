package bind_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// Label keys of the tests (the production defaults).
const (
	queueKey   = "runai/queue"
	projectKey = "hopsworks.ai/project"
	deptKey    = "hopsworks.ai/department"
	idKey      = nsview.ProjectIDLabel
)

var keys = nsview.Keys{Queue: queueKey, Project: projectKey, Department: deptKey}

const (
	pathProjects    = "/api/v1/org-unit/projects"
	pathDepartments = "/api/v1/org-unit/departments"
)

// env is one control plane (the Run:ai simulator on loopback, reached
// through the real runai.Client) and one Kubernetes API (the
// controller-runtime fake client), with a Binder and a Controller over them.
type env struct {
	t      *testing.T
	sim    *runaitest.Server
	k8s    client.WithWatch // the fake API server; Binder.Client may wrap it
	binder *bind.Binder
	ctrl   *bind.Controller
}

type envOpts struct {
	seed    runaitest.Seed
	objects []client.Object
	// funcs intercept the Binder's and Controller's writes (not the
	// test's own reads and writes, which go to the fake client directly).
	funcs *interceptor.Funcs
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	sim := runaitest.Run(t, o.seed)
	k8s := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(o.objects...).Build()
	e := &env{t: t, sim: sim, k8s: k8s}
	var writer client.Client = k8s
	if o.funcs != nil {
		writer = interceptor.NewClient(k8s, *o.funcs)
	}
	e.binder = newBinder(t, sim, writer, k8s)
	e.ctrl = &bind.Controller{Binder: e.binder, Client: writer, Interval: time.Minute, Log: logr.Discard()}
	return e
}

// newRunAI is the production client pointed at the simulator, with short
// retry and poll periods so outage tests stay fast.
func newRunAI(t *testing.T, sim *runaitest.Server) *runai.Client {
	t.Helper()
	seed := sim.Seed()
	c, err := runai.NewClient(runai.ClientConfig{
		BaseURL: sim.URL(), ClientID: seed.ClientID, ClientSecret: seed.ClientSecret,
		Logger:       logr.Discard(),
		Retry:        runai.RetryPolicy{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
		PollInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	return c
}

// newBinder is a Binder with its own Run:ai client (its own token, cluster
// and department caches), as a separate replica would have.
func newBinder(t *testing.T, sim *runaitest.Server, writer client.Client, reader client.Reader) *bind.Binder {
	return &bind.Binder{
		RunAI:             newRunAI(t, sim),
		Client:            writer,
		Reader:            reader,
		Keys:              keys,
		DefaultDepartment: "default",
		GPUQuota:          2,
		ReadyTimeout:      2 * time.Second,
		PollInterval:      20 * time.Millisecond,
		Log:               logr.Discard(),
		Enabled:           true,
	}
}

// managedNS is a Hopsworks project namespace; kv are extra labels.
func managedNS(name string, kv ...string) *corev1.Namespace {
	ns := &corev1.Namespace{}
	ns.Name = name
	ns.Labels = map[string]string{projectKey: name}
	for i := 0; i+1 < len(kv); i += 2 {
		ns.Labels[kv[i]] = kv[i+1]
	}
	return ns
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ns reads a namespace from the fake API server; nil when it is gone.
func (e *env) ns(name string) *corev1.Namespace {
	e.t.Helper()
	var ns corev1.Namespace
	err := e.k8s.Get(context.Background(), client.ObjectKey{Name: name}, &ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(e.t, err)
	return &ns
}

func (e *env) create(objs ...client.Object) {
	e.t.Helper()
	for _, o := range objs {
		require.NoError(e.t, e.k8s.Create(context.Background(), o))
	}
}

// delete deletes a namespace the way the API server does: with our
// finalizer present, it stays with a deletionTimestamp.
func (e *env) delete(name string) {
	e.t.Helper()
	ns := &corev1.Namespace{}
	ns.Name = name
	require.NoError(e.t, e.k8s.Delete(context.Background(), ns))
}

func (e *env) reconcile(name string) ctrl.Result {
	e.t.Helper()
	res, err := e.ctrl.Reconcile(ctxT(e.t), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	require.NoError(e.t, err)
	return res
}

func (e *env) pass() bind.PassResult {
	e.t.Helper()
	res, err := e.ctrl.Pass(ctxT(e.t))
	require.NoError(e.t, err, "pass failures: %v", res.Failures)
	return res
}

// project returns the simulator's project of that name.
func (e *env) project(name string) runai.Project {
	e.t.Helper()
	p, ok := e.sim.ProjectByName(name)
	require.True(e.t, ok, "Run:ai project %s does not exist", name)
	return p
}

func (e *env) dept(name string) runai.Department {
	e.t.Helper()
	d, ok := e.sim.DepartmentByName(name)
	require.True(e.t, ok, "Run:ai department %s does not exist", name)
	return d
}

// live reports the simulator's projects bound to namespace that are not
// being deleted.
func (e *env) boundTo(namespace string) []runai.Project {
	var out []runai.Project
	for _, p := range e.sim.Projects() {
		if p.BoundNamespace() == namespace && p.Status.Phase != runai.PhaseDeleting {
			out = append(out, p)
		}
	}
	return out
}

func (e *env) creates() int { return e.sim.CountCalls("POST", pathProjects) }

// nonTokenCalls are the recorded requests other than token requests.
func nonTokenCalls(sim *runaitest.Server) []runaitest.Call {
	var out []runaitest.Call
	for _, c := range sim.Calls() {
		if c.Path != "/api/v1/token" && c.Path != "/api/v2/token" {
			out = append(out, c)
		}
	}
	return out
}

// requireOwned asserts that namespace is bound to a project we created and
// returns it.
func (e *env) requireOwned(namespace string) runai.Project {
	e.t.Helper()
	ns := e.ns(namespace)
	require.NotNil(e.t, ns, "namespace %s", namespace)
	bound := e.boundTo(namespace)
	require.Len(e.t, bound, 1, "Run:ai projects bound to %s", namespace)
	p := bound[0]
	assert.Equal(e.t, p.Name, ns.Labels[queueKey], "queue label of %s", namespace)
	assert.Equal(e.t, p.ID, ns.Labels[idKey], "project-id label of %s", namespace)
	assert.True(e.t, bind.CreatedByUs(p, namespace), "project %s carries our marker", p.Name)
	assert.Contains(e.t, ns.Finalizers, bind.Finalizer)
	return p
}

// requireAdopted asserts that namespace is bound to project name, which we
// did not create.
func (e *env) requireAdopted(namespace, name string) runai.Project {
	e.t.Helper()
	ns := e.ns(namespace)
	require.NotNil(e.t, ns, "namespace %s", namespace)
	p := e.project(name)
	assert.Equal(e.t, name, ns.Labels[queueKey])
	assert.NotContains(e.t, ns.Labels, idKey, "an adopted project is never recorded as ours")
	assert.False(e.t, bind.CreatedByUs(p, namespace))
	assert.Equal(e.t, namespace, p.BoundNamespace())
	return p
}

// requireUnbound asserts namespace carries no binding label.
func (e *env) requireUnbound(namespace string) {
	e.t.Helper()
	ns := e.ns(namespace)
	require.NotNil(e.t, ns)
	assert.NotContains(e.t, ns.Labels, queueKey)
	assert.NotContains(e.t, ns.Labels, idKey)
}

// checkInvariants are the binding invariants that must hold after every
// pass, whatever crashed before it:
//   - a bound namespace has exactly one live Run:ai project bound to it, and
//     its queue label names that project;
//   - the project-id label is present exactly when that project carries our
//     marker (owned), and then names its id, and the finalizer is there;
//   - no managed namespace has two live projects;
//   - no project carrying our marker outlives its namespace (nothing leaked).
func (e *env) checkInvariants() {
	e.t.Helper()
	var list corev1.NamespaceList
	require.NoError(e.t, e.k8s.List(context.Background(), &list))
	projects := e.sim.Projects()
	byNS := map[string][]runai.Project{}
	for _, p := range projects {
		if p.Status.Phase != runai.PhaseDeleting {
			byNS[p.BoundNamespace()] = append(byNS[p.BoundNamespace()], p)
		}
	}
	existing := map[string]bool{}
	for _, ns := range list.Items {
		existing[ns.Name] = true
		if _, managed := ns.Labels[projectKey]; !managed || ns.DeletionTimestamp != nil {
			continue
		}
		bound := byNS[ns.Name]
		assert.LessOrEqual(e.t, len(bound), 1, "namespace %s has several Run:ai projects: %v", ns.Name, names(bound))
		queue, id := ns.Labels[queueKey], ns.Labels[idKey]
		if queue == "" {
			assert.Empty(e.t, id, "namespace %s: project-id label without queue label", ns.Name)
			continue
		}
		if !assert.Len(e.t, bound, 1, "bound namespace %s has no live Run:ai project", ns.Name) {
			continue
		}
		p := bound[0]
		assert.Equal(e.t, p.Name, queue, "namespace %s: queue label", ns.Name)
		if bind.CreatedByUs(p, ns.Name) {
			assert.Equal(e.t, p.ID, id, "namespace %s: owned project must be recorded by id", ns.Name)
			assert.Contains(e.t, ns.Finalizers, bind.Finalizer, "namespace %s: owned project without finalizer", ns.Name)
		} else {
			assert.Empty(e.t, id, "namespace %s: adopted project recorded as ours", ns.Name)
		}
	}
	for _, p := range projects {
		if ns := p.BoundNamespace(); bind.CreatedByUs(p, ns) && p.Status.Phase != runai.PhaseDeleting {
			assert.True(e.t, existing[ns], "project %s (ours) leaked: namespace %s is gone", p.Name, ns)
		}
	}
}

func names(ps []runai.Project) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name + "#" + p.ID
	}
	return out
}

// failPatchOnce fails the first namespace patch whose body contains marker.
func failPatchOnce(marker string) (*interceptor.Funcs, *atomic.Int32) {
	failed := new(atomic.Int32)
	return &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err == nil && strings.Contains(string(data), marker) && failed.CompareAndSwap(0, 1) {
				return apierrors.NewServiceUnavailable("injected: the API server went away")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}, failed
}

func describeCalls(calls []runaitest.Call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "\n  %s %s?%s -> %d", c.Method, c.Path, c.RawQuery, c.Status)
	}
	return b.String()
}

func hasFinalizer(ns *corev1.Namespace) bool { return slices.Contains(ns.Finalizers, bind.Finalizer) }

// hookedRunAI is a replica's Run:ai client with hooks around project
// creation, for forcing an interleaving that only Run:ai's side can mark
// (another replica's bind before ours creates, a namespace deleted right
// after the create).
type hookedRunAI struct {
	runai.API
	beforeCreate func(ctx context.Context)
	afterCreate  func(ctx context.Context, p runai.Project)
}

func (h hookedRunAI) CreateProject(ctx context.Context, req runai.ProjectCreationRequest) (runai.Project, error) {
	if h.beforeCreate != nil {
		h.beforeCreate(ctx)
	}
	p, err := h.API.CreateProject(ctx, req)
	if err == nil && h.afterCreate != nil {
		h.afterCreate(ctx, p)
	}
	return p, err
}

// noNewFinalizersWhileDeleting makes the fake API server refuse, as the real
// one does, a write that adds a finalizer to an object being deleted.
func noNewFinalizersWhileDeleting() *interceptor.Funcs {
	return &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			var cur corev1.Namespace
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err == nil && cur.DeletionTimestamp != nil {
				data, _ := patch.Data(obj)
				if strings.Contains(string(data), bind.Finalizer) && !hasFinalizer(&cur) {
					return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Namespace").GroupKind(), cur.Name, field.ErrorList{
						field.Forbidden(field.NewPath("metadata", "finalizers"), "no new finalizers can be added if the object is being deleted"),
					})
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
}
