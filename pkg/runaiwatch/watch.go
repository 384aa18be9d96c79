// Package runaiwatch watches Run:ai's own admission Deployments. Their
// webhooks fail closed for every namespace labelled runai/queue, so while they
// are down no pod can be created in a bound namespace; operators need to see
// that next to our own health. It never refuses a pod on their account.
package runaiwatch

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Deployments are Run:ai's admission Deployments in its namespace.
var Deployments = []string{"runai-admission-controller", "admission"}

// Namespace is where Run:ai installs them.
const Namespace = "runai"

// Status is the availability of one Deployment.
type Status struct {
	Name      string
	Found     bool
	Available bool
	Ready     int32
	Desired   int32
}

// Available reports whether a Deployment serves: it has the Available
// condition true, or at least one available replica when conditions are absent.
func Available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == "True"
		}
	}
	return d.Status.AvailableReplicas > 0
}

// Watcher polls the Deployments (a Get each: no cluster-wide watch, and the
// chart grants get on these two names only).
type Watcher struct {
	Reader   client.Reader
	Interval time.Duration
	Log      logr.Logger
	Report   func(deployment string, available bool)

	last map[string]bool
}

// NeedLeaderElection is false: every replica reports what it sees.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Check reads the Deployments once.
func (w *Watcher) Check(ctx context.Context) []Status {
	out := make([]Status, 0, len(Deployments))
	for _, name := range Deployments {
		var d appsv1.Deployment
		err := w.Reader.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, &d)
		st := Status{Name: name}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			w.Log.V(1).Info("reading Run:ai admission Deployment", "deployment", name, "error", err.Error())
			continue
		default:
			st.Found, st.Available, st.Ready = true, Available(&d), d.Status.ReadyReplicas
			if d.Spec.Replicas != nil {
				st.Desired = *d.Spec.Replicas
			}
		}
		out = append(out, st)
	}
	return out
}

// Start polls until ctx ends, reporting each Deployment and logging changes.
func (w *Watcher) Start(ctx context.Context) error {
	if w.Interval <= 0 {
		w.Interval = 15 * time.Second
	}
	w.last = map[string]bool{}
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		for _, st := range w.Check(ctx) {
			if w.Report != nil {
				w.Report(st.Name, st.Available)
			}
			if prev, seen := w.last[st.Name]; !seen || prev != st.Available {
				if st.Available {
					w.Log.Info("Run:ai admission Deployment available", "deployment", Namespace+"/"+st.Name, "ready", st.Ready)
				} else {
					w.Log.Info("Run:ai admission Deployment NOT available: no pod can be created in namespaces bound to Run:ai until it is back",
						"deployment", Namespace+"/"+st.Name, "found", st.Found, "ready", st.Ready, "desired", st.Desired)
				}
			}
			w.last[st.Name] = st.Available
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
