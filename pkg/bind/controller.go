package bind

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// StatusAnnotation records the namespace's Run:ai status for people and for
// the GPU view: Bound, Adopted, Unbound (with the reason), or a status code
// such as RUN_AI_DEPARTMENT_DRIFT.
const StatusAnnotation = "runai-webhook.hopsworks.ai/status"

// Status codes shown in the GPU view (DESIGN.md §3 rule 8).
const (
	StatusOK          = "OK"
	StatusNotBound    = "RUN_AI_PROJECT_NOT_BOUND"
	StatusDrift       = "RUN_AI_DEPARTMENT_DRIFT"
	StatusBindingLeft = "RUN_AI_BINDING_LEFT"
	StatusUnreachable = "RUN_AI_UNREACHABLE"
)

// reconcileWorkers is how many namespaces the controller handles at once.
const reconcileWorkers = 4

// Controller binds new managed namespaces right away, deletes the projects we
// created when their namespace goes, and runs the background pass. It runs
// in the `reconcile` sidecar under leader election, so one replica acts.
type Controller struct {
	Binder   *Binder
	Client   client.Client
	Interval time.Duration
	Log      logr.Logger
	// PassObserver is told of each pass (metrics); optional.
	PassObserver PassObserver
}

// PassObserver receives pass results.
type PassObserver interface {
	ObservePass(r PassResult, took time.Duration, err error)
}

// SetupWithManager registers the namespace reconciler and the periodic pass.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[c.Binder.Keys.Project]
		return ok || slices.Contains(o.GetFinalizers(), Finalizer)
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("namespace-binding").
		// Several managers may run in one process (tests, the demo).
		// Several workers: a reconcile may wait on a slow Run:ai for up to
		// half a minute (a bind, or a deletion waiting for the project to
		// go), and with one worker every other namespace would wait behind
		// it. A namespace is never reconciled by two workers at once.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: reconcileWorkers}).
		For(&corev1.Namespace{}, builder.WithPredicates(managed, predicate.Funcs{
			// Label and finalizer changes matter; status churn does not.
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectNew.GetDeletionTimestamp() != nil ||
					!mapsEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
			},
		})).
		Complete(c); err != nil {
		return fmt.Errorf("setting up the namespace controller: %w", err)
	}
	return mgr.Add(&passRunner{c: c})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Reconcile handles one namespace: deletion first, then binding.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns corev1.Namespace
	if err := c.Client.Get(ctx, req.NamespacedName, &ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ns.DeletionTimestamp != nil {
		return c.finalize(ctx, &ns)
	}
	v := View(&ns)
	if !c.Binder.Enabled || !c.Binder.Keys.Managed(v) || c.Binder.Keys.BoundProject(v) != "" {
		return ctrl.Result{}, nil
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.Binder.Bind(bctx, ns.Name); err != nil {
		c.Binder.event(&ns, corev1.EventTypeWarning, "BindFailed", "not bound to Run:ai yet: %v", err)
		c.Log.Info("bind failed; the namespace stays unbound until Run:ai answers", "namespace", ns.Name, "error", err.Error())
		if _, refused := err.(*Refusal); refused {
			return ctrl.Result{}, nil // the pass retries; nothing changes by hammering
		}
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// finalize deletes the Run:ai project we created for a namespace being
// deleted, then releases the namespace. With Run:ai down it keeps the
// finalizer and retries, so nothing leaks; an adopted project is left alone.
func (c *Controller) finalize(ctx context.Context, ns *corev1.Namespace) (ctrl.Result, error) {
	if !slices.Contains(ns.Finalizers, Finalizer) {
		return ctrl.Result{}, nil
	}
	if c.Binder.Enabled {
		done, err := c.deleteOwnedProject(ctx, ns)
		if err != nil {
			c.Binder.event(ns, corev1.EventTypeWarning, "DeleteFailed", "deleting the Run:ai project failed, retrying: %v", err)
			return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
		}
		if !done {
			return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
		}
	} else {
		c.Log.Info("integration off: leaving the Run:ai project in place", "namespace", ns.Name)
	}
	patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
	ns.Finalizers = slices.DeleteFunc(ns.Finalizers, func(f string) bool { return f == Finalizer })
	if err := c.Client.Patch(ctx, ns, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing finalizer from namespace %s: %w", ns.Name, err)
	}
	return ctrl.Result{}, nil
}

// deleteOwnedProject deletes the project we created for ns, if any, and
// reports whether it is gone.
func (c *Controller) deleteOwnedProject(ctx context.Context, ns *corev1.Namespace) (bool, error) {
	b := c.Binder
	var target *runai.Project
	if id := ns.Labels["hopsworks.ai/runai-project-id"]; id != "" {
		p, err := b.RunAI.GetProject(ctx, id)
		switch {
		case runai.IsNotFound(err):
		case err != nil:
			return false, err
		case CreatedByUs(p, ns.Name):
			target = &p
		}
	}
	if target == nil {
		// A crash between create and label: find it by name and marker.
		cluster, err := b.Cluster(ctx)
		if err != nil {
			return false, err
		}
		list, err := b.RunAI.ListProjects(ctx, cluster.UUID, ns.Name)
		if err != nil {
			return false, err
		}
		for i := range list {
			if CreatedByUs(list[i], ns.Name) {
				target = &list[i]
			}
		}
	}
	if target == nil {
		return true, nil
	}
	if err := b.RunAI.DeleteProject(ctx, target.ID); err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.RunAI.WaitProjectGone(wctx, target.ID); err != nil {
		return false, nil
	}
	b.event(ns, corev1.EventTypeNormal, "ProjectDeleted", "deleted Run:ai project %s (id %s) created for this namespace", target.Name, target.ID)
	b.observe("deleted")
	return true, nil
}

// passRunner runs the pass every interval; the manager starts it only on the
// leader.
type passRunner struct{ c *Controller }

func (p *passRunner) NeedLeaderElection() bool { return true }

func (p *passRunner) Start(ctx context.Context) error {
	t := time.NewTicker(p.c.Interval)
	defer t.Stop()
	for {
		start := time.Now()
		res, err := p.c.Pass(ctx)
		if p.c.PassObserver != nil {
			p.c.PassObserver.ObservePass(res, time.Since(start), err)
		}
		if err != nil {
			p.c.Log.Info("background pass failed; next one in an interval", "error", err.Error())
		} else {
			p.c.Log.V(1).Info("background pass", "bound", res.Bound, "rebound", res.Rebound, "drift", res.Drift, "unbound", res.Unbound, "orphansDeleted", res.OrphansDeleted, "took", time.Since(start).String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
