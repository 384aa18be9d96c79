// Package quota decides whether a non-preemptible GPU pod fits in its Run:ai
// project's deserved GPUs. Run:ai does not preempt notebooks, terminals, apps
// and deployments, so one that does not fit would wait forever; refusing it at
// admission with the GPUs left is the Hopsworks behaviour.
//
// The decision (Decide) is pure. The Tracker around it adds what a replica
// needs to be right under concurrency: a lock per namespace so two creates
// cannot both take the last GPU, short-lived reservations for pods admitted
// but not yet seen by the pod cache, and a bound on how old the Run:ai quota
// behind a refusal may be.
package quota

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// Decision is the outcome of a quota check.
type Decision struct {
	Fits    bool
	Left    float64 // deserved minus held, never below 0
	Message string  // the refusal, naming the GPUs left
}

// Decide reports whether a pod asking for asks GPUs fits in deserved minus
// held. Amounts are rounded to 1/1000 GPU so float noise in fractions (0.1 +
// 0.2) never refuses a pod that fits exactly.
func Decide(project string, deserved, held, asks float64) Decision {
	left := round(math.Max(0, deserved-held))
	if round(asks) <= left {
		return Decision{Fits: true, Left: left}
	}
	return Decision{Fits: false, Left: left, Message: fmt.Sprintf(
		"project %s has %s of %s GPUs left for notebooks, terminals, apps and deployments; this pod asks for %s. "+
			"Stop a running one, ask your Run:ai administrator for more deserved GPUs, or run it as a job (preemptible, may use idle GPUs over quota)",
		project, Format(left), Format(deserved), Format(asks))}
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }

// Format prints a GPU amount without float noise: 2, 0.5, 1.25.
func Format(v float64) string { return strconv.FormatFloat(round(v), 'f', -1, 64) }

// ProjectQuota is what Run:ai says about a project on its default node pool.
type ProjectQuota struct {
	Project                 string
	Deserved                float64
	AllocatedNonPreemptible float64
	ReadAt                  time.Time
}

// Source reads a project's quota. With fresh=false it may answer from a
// cache; with fresh=true it must read Run:ai.
type Source interface {
	ProjectQuota(ctx context.Context, namespace, project, projectID string, fresh bool) (ProjectQuota, error)
}

// HeldPod is a running or waiting non-preemptible pod and its GPUs.
type HeldPod struct {
	ReservationKey string // the admission id it was admitted under, if any
	GPUs           float64
}

// Pods lists the namespace's running and waiting non-preemptible GPU pods.
type Pods interface {
	HeldNonPreemptible(namespace string) []HeldPod
}

// Request is one check.
type Request struct {
	Namespace, Project, ProjectID string
	Asks                          float64
	Key                           string // reservation key (admission id)
	DryRun                        bool   // decide, but reserve nothing
}

// Result is a check's outcome. Checked is false when Run:ai could not be read:
// the check is then skipped (Run:ai enforces quota at scheduling) and Warning
// says so.
type Result struct {
	Checked  bool
	Decision Decision
	Held     float64
	Quota    ProjectQuota
	Warning  string
}

type reservation struct {
	gpus    float64
	expires time.Time
}

type nsState struct {
	mu           sync.Mutex
	reservations map[string]reservation
}

// Tracker runs checks for one replica.
type Tracker struct {
	Source Source
	Pods   Pods
	// MaxAge is the oldest quota a refusal may rest on; older is re-read first.
	MaxAge time.Duration
	// ReserveFor is how long an admitted pod's GPUs stay reserved while the
	// pod cache has not seen it (covers a create that another webhook refused).
	ReserveFor time.Duration
	Now        func() time.Time

	mu sync.Mutex
	ns map[string]*nsState
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Tracker) state(ns string) *nsState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ns == nil {
		t.ns = map[string]*nsState{}
	}
	s, ok := t.ns[ns]
	if !ok {
		s = &nsState{reservations: map[string]reservation{}}
		t.ns[ns] = s
	}
	return s
}

// held sums the GPUs the namespace's non-preemptible pods hold, plus live
// reservations of pods the cache has not seen yet, except own: the
// reservation of the pod being checked. A pod is checked twice under the same
// key when the bind webhook admits the first pod of a namespace and the guard
// webhook then sees it with the reservation annotation the bind webhook set;
// counting its own reservation would refuse a pod that fits exactly.
// Caller holds s.mu.
func (t *Tracker) held(s *nsState, ns, own string, now time.Time) float64 {
	seen := map[string]bool{}
	total := 0.0
	for _, p := range t.Pods.HeldNonPreemptible(ns) {
		total += p.GPUs
		if p.ReservationKey != "" {
			seen[p.ReservationKey] = true
		}
	}
	for k, r := range s.reservations {
		if seen[k] || now.After(r.expires) {
			delete(s.reservations, k)
			continue
		}
		if k == own {
			continue
		}
		total += r.gpus
	}
	return total
}

// Check decides r under the namespace's lock and reserves the GPUs of a pod
// that fits.
func (t *Tracker) Check(ctx context.Context, r Request) Result {
	s := t.state(r.Namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := t.now()
	held := t.held(s, r.Namespace, r.Key, now)

	q, err := t.Source.ProjectQuota(ctx, r.Namespace, r.Project, r.ProjectID, false)
	if err != nil {
		return skipped(r, err)
	}
	d := Decide(r.Project, q.Deserved, math.Max(held, q.AllocatedNonPreemptible), r.Asks)
	if !d.Fits && now.Sub(q.ReadAt) > t.MaxAge {
		// Never refuse on an old quota: an admin may have raised it.
		q, err = t.Source.ProjectQuota(ctx, r.Namespace, r.Project, r.ProjectID, true)
		if err != nil {
			return skipped(r, err)
		}
		d = Decide(r.Project, q.Deserved, math.Max(held, q.AllocatedNonPreemptible), r.Asks)
	}
	if !r.DryRun && r.Key != "" {
		if d.Fits {
			s.reservations[r.Key] = reservation{gpus: r.Asks, expires: now.Add(t.ReserveFor)}
		} else {
			// A pod refused now is not created: drop what an earlier check
			// of it (the bind webhook's) reserved.
			delete(s.reservations, r.Key)
		}
	}
	return Result{Checked: true, Decision: d, Held: held, Quota: q}
}

func skipped(r Request, err error) Result {
	return Result{Checked: false, Decision: Decision{Fits: true}, Warning: fmt.Sprintf(
		"runai-webhook: GPU quota of Run:ai project %s not checked, Run:ai could not be read (%v); Run:ai enforces the quota when it schedules the pod",
		r.Project, err)}
}
