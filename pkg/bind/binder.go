// Package bind owns the link between a managed namespace and its Run:ai
// project: binding (adopt an existing project, else create one), the
// background pass, deletion of the projects we created, and department moves.
//
// A bind makes one Kubernetes write, after Run:ai has answered:
//
//  1. the Run:ai project is created with an ownership marker in its
//     description (so a project we created is recognised as ours even when
//     step 2 never happened);
//  2. one strategic-merge patch labels the namespace runai/queue=<project>
//     and, for a project we created, hopsworks.ai/runai-project-id=<id> and
//     adds our finalizer (finalizers merge: another controller's stay).
//
// Every cut point is recoverable. A crash (or a failed patch) after 1 leaves
// a marked project and an unlabelled namespace without our finalizer: if the
// namespace lives, the next bind or pass finds the project by name, reads the
// marker and records it as owned (labels and finalizer, as in 2); if the
// namespace is deleted meanwhile, nothing holds it, and the pass deletes
// marked projects whose namespace is gone (deleteOrphans). A bind whose patch
// fails because the namespace is gone or being deleted deletes the project
// itself at once, best effort. A project deleted by an admin after 2 is
// noticed by the pass, which clears the stale labels and binds again.
package bind

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// Finalizer holds a managed namespace until the Run:ai project we created
// for it is deleted.
const Finalizer = "runai-webhook.hopsworks.ai/runai-project"

// ownerMarkerPrefix starts the description of every project we create.
const ownerMarkerPrefix = "Created by runai-webhook (Hopsworks) for namespace "

// OwnerMarker is the description we give a project created for namespace.
func OwnerMarker(namespace string) string { return ownerMarkerPrefix + namespace }

// CreatedByUs reports whether p was created by us for namespace.
func CreatedByUs(p runai.Project, namespace string) bool {
	return p.Description == OwnerMarker(namespace)
}

// Binder binds namespaces. It is safe for concurrent use: concurrent binds of
// one namespace in a replica share one call; across replicas Run:ai's 409 on
// the project name and a re-read settle who created it.
type Binder struct {
	RunAI  runai.API
	Client client.Client // writes (patches) namespaces
	Reader client.Reader // live reads, never a stale cache
	// Namespaces, when set, is where a bind reads its namespace first (the
	// webhook's namespace cache, which reads live what it has not seen):
	// during a storm of first pods a live read waits behind the storm in
	// the API server. Only an unbound, managed, live namespace is taken from
	// it; anything else is read live. A department label changed in the
	// instant the cache lags is reported by record and by the pass (drift).
	Namespaces        nsview.Getter
	Keys              nsview.Keys
	DefaultDepartment string
	GPUQuota          float64
	// ReadyTimeout bounds the wait for a new project to become Ready.
	ReadyTimeout time.Duration
	PollInterval time.Duration
	Events       record.EventRecorder
	Log          logr.Logger
	// Enabled is run_ai_enable: off, nothing calls Run:ai.
	Enabled bool
	// Observer counts binds, adoptions and failures (metrics); optional.
	Observer Observer

	flight singleflight.Group
	cache  lookupCache
	// lists shares full project lists among concurrent binds (projectlist.go).
	lists projectLists
	// moved remembers finished department moves (move.go).
	moved sync.Map // namespace -> movedEntry
}

// Observer is told of each bind outcome.
type Observer interface {
	ObserveBind(outcome string) // created, adopted, failed, moved, deleted
}

// lookupCache keeps Run:ai facts that change rarely, so a first-pod bind
// costs the project list and one create, not five more reads.
type lookupCache struct {
	mu      sync.Mutex
	cluster *runai.Cluster
	pool    *runai.NodePool
	poolAt  time.Time
	depts   map[string]deptEntry
}

type deptEntry struct {
	dept runai.Department
	ok   bool
	at   time.Time
}

const lookupTTL = time.Minute

// shared runs one lookup for all concurrent callers with the same key, so a
// storm of first pods across many namespaces reads the node pool and each
// department once, not once per bind. Lookup keys contain ':' and cannot
// clash with the namespace names the same group single-flights binds on.
func shared[T any](b *Binder, key string, fn func() (T, error)) (T, error) {
	v, err, _ := b.flight.Do(key, func() (any, error) { return fn() })
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// Cluster returns the configured Run:ai cluster (read once).
func (b *Binder) Cluster(ctx context.Context) (runai.Cluster, error) {
	b.cache.mu.Lock()
	c := b.cache.cluster
	b.cache.mu.Unlock()
	if c != nil {
		return *c, nil
	}
	got, err := shared(b, "lookup:cluster", func() (runai.Cluster, error) { return b.RunAI.Cluster(ctx) })
	if err != nil {
		return runai.Cluster{}, err
	}
	b.cache.mu.Lock()
	b.cache.cluster = &got
	b.cache.mu.Unlock()
	return got, nil
}

// NodePool returns the cluster's default node pool (cached for a minute).
func (b *Binder) NodePool(ctx context.Context, clusterID string) (runai.NodePool, error) {
	b.cache.mu.Lock()
	p, at := b.cache.pool, b.cache.poolAt
	b.cache.mu.Unlock()
	if p != nil && time.Since(at) < lookupTTL {
		return *p, nil
	}
	got, err := shared(b, "lookup:pool:"+clusterID, func() (runai.NodePool, error) { return b.RunAI.DefaultNodePool(ctx, clusterID) })
	if err != nil {
		return runai.NodePool{}, err
	}
	b.cache.mu.Lock()
	b.cache.pool, b.cache.poolAt = &got, time.Now()
	b.cache.mu.Unlock()
	return got, nil
}

// department finds the Run:ai department named name (cached for a minute).
func (b *Binder) department(ctx context.Context, clusterID, name string) (runai.Department, bool, error) {
	b.cache.mu.Lock()
	e, hit := b.cache.depts[name]
	b.cache.mu.Unlock()
	if hit && time.Since(e.at) < lookupTTL {
		return e.dept, e.ok, nil
	}
	list, err := shared(b, "lookup:dept:"+clusterID+":"+name, func() ([]runai.Department, error) { return b.RunAI.ListDepartments(ctx, clusterID, name) })
	if err != nil {
		return runai.Department{}, false, err
	}
	e = deptEntry{at: time.Now()}
	for _, d := range list {
		if d.Name == name {
			e.dept, e.ok = d, true
			break
		}
	}
	b.cache.mu.Lock()
	if b.cache.depts == nil {
		b.cache.depts = map[string]deptEntry{}
	}
	b.cache.depts[name] = e
	b.cache.mu.Unlock()
	return e.dept, e.ok, nil
}

// MapDepartment returns the Run:ai department a Hopsworks department maps to:
// the one with exactly its name, else the default department. Departments
// are never created. "" means the default department.
func (b *Binder) MapDepartment(ctx context.Context, clusterID, hopsworksDept string) (runai.Department, error) {
	return b.mapDepartment(ctx, clusterID, hopsworksDept, nil)
}

func (b *Binder) mapDepartment(ctx context.Context, clusterID, hopsworksDept string, ix *ProjectIndex) (runai.Department, error) {
	lookup := func(name string) (runai.Department, bool, error) {
		if ix != nil && ix.DeptByName != nil {
			d, ok := ix.DeptByName[name]
			return d, ok, nil
		}
		return b.department(ctx, clusterID, name)
	}
	if hopsworksDept != "" {
		d, ok, err := lookup(hopsworksDept)
		if err != nil {
			return runai.Department{}, fmt.Errorf("looking up Run:ai department %s: %w", hopsworksDept, err)
		}
		if ok {
			return d, nil
		}
	}
	d, ok, err := lookup(b.DefaultDepartment)
	if err != nil {
		return runai.Department{}, fmt.Errorf("looking up Run:ai department %s: %w", b.DefaultDepartment, err)
	}
	if !ok {
		return runai.Department{}, &Refusal{Message: fmt.Sprintf(
			"run_ai_default_department %q does not exist in Run:ai; create it in Run:ai or set run_ai_default_department to an existing department", b.DefaultDepartment)}
	}
	return d, nil
}

// Bind binds namespace now and returns the outcome. Concurrent calls for the
// same namespace share one bind.
func (b *Binder) Bind(ctx context.Context, namespace string) (Outcome, error) {
	if !b.Enabled {
		return Outcome{}, &Refusal{Message: "the Run:ai integration is off (run_ai_enable=false)"}
	}
	ch := b.flight.DoChan(namespace, func() (any, error) {
		return b.bind(ctx, namespace, nil)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			b.observe("failed")
			return Outcome{}, r.Err
		}
		return r.Val.(Outcome), nil
	case <-ctx.Done():
		return Outcome{}, fmt.Errorf("binding namespace %s: %w", namespace, ctx.Err())
	}
}

// Preview says what Bind would do, with no write anywhere.
func (b *Binder) Preview(ctx context.Context, namespace string) (Outcome, error) {
	if !b.Enabled {
		return Outcome{}, &Refusal{Message: "the Run:ai integration is off (run_ai_enable=false)"}
	}
	ns, err := b.readNamespace(ctx, namespace)
	if err != nil {
		return Outcome{}, err
	}
	if p := b.Keys.BoundProject(ns); p != "" {
		return Outcome{Namespace: namespace, Project: p, ProjectID: b.Keys.OwnedProjectID(ns), AlreadyBound: true, Ready: true}, nil
	}
	cluster, err := b.Cluster(ctx)
	if err != nil {
		return Outcome{}, err
	}
	existing, err := b.findBound(ctx, cluster.UUID, namespace, nil)
	if err != nil {
		return Outcome{}, err
	}
	if existing != nil {
		return Outcome{Namespace: namespace, Project: existing.Name, ProjectID: existing.ID, Department: b.departmentName(ctx, existing.ParentID, nil),
			Adopted: !CreatedByUs(*existing, namespace), Ready: existing.Status.Phase == runai.PhaseReady}, nil
	}
	hd, err := b.Keys.HopsworksDepartment(ns)
	if err != nil {
		return Outcome{}, &Refusal{Message: err.Error()}
	}
	dept, err := b.MapDepartment(ctx, cluster.UUID, hd)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Namespace: namespace, Project: namespace, Department: dept.Name}, nil
}

func (b *Binder) observe(outcome string) {
	if b.Observer != nil {
		b.Observer.ObserveBind(outcome)
	}
}

func (b *Binder) readNamespace(ctx context.Context, name string) (nsview.Namespace, error) {
	var ns corev1.Namespace
	if err := b.Reader.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nsview.Namespace{}, &Refusal{Message: fmt.Sprintf("namespace %s does not exist", name)}
		}
		return nsview.Namespace{}, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	v := View(&ns)
	if !b.Keys.Managed(v) {
		return v, &Refusal{Message: fmt.Sprintf("namespace %s is not a Hopsworks project (no %s label)", name, b.Keys.Project)}
	}
	return v, nil
}

// View converts a namespace to the binding view.
func View(ns *corev1.Namespace) nsview.Namespace {
	return nsview.Namespace{Name: ns.Name, Labels: ns.Labels, Terminating: ns.DeletionTimestamp != nil}
}

// ProjectIndex is every Run:ai project of the cluster, read once per pass,
// so the pass needs no per-namespace Run:ai read.
type ProjectIndex struct {
	ByNamespace map[string][]runai.Project
	ByName      map[string]runai.Project
	ByID        map[string]runai.Project
	DeptByName  map[string]runai.Department
	DeptByID    map[string]runai.Department
}

// NewProjectIndex indexes projects.
func NewProjectIndex(projects []runai.Project) *ProjectIndex {
	ix := &ProjectIndex{ByNamespace: map[string][]runai.Project{}, ByName: map[string]runai.Project{}, ByID: map[string]runai.Project{}}
	for _, p := range projects {
		ix.ByName[p.Name] = p
		ix.ByID[p.ID] = p
		if ns := p.BoundNamespace(); ns != "" {
			ix.ByNamespace[ns] = append(ix.ByNamespace[ns], p)
		}
	}
	return ix
}

// findBound returns the Run:ai project bound to namespace, nil when none.
// With an index (the pass) it reads nothing; without one (admission, the
// namespace controller, Preview) it lists the cluster's projects (all
// pages). Looking the namespace's name up would be cheaper, but it misses an
// adoptable project with another name (an admin's "legacy" bound to
// team-x): the bind would then create a second project for the namespace,
// and whether Run:ai refuses a second project on a namespace is not
// documented (API-NOTES §4, Duplicates). A namespace is bound once, so the
// few list pages are paid once per namespace; bound namespaces cost nothing.
// Concurrent binds of different namespaces share one list (projectLists),
// so a storm of fresh namespaces costs two lists, not one per namespace.
func (b *Binder) findBound(ctx context.Context, clusterID, namespace string, ix *ProjectIndex) (*runai.Project, error) {
	if ix == nil {
		api := b.RunAI
		list, err := b.lists.get(ctx, clusterID, func(ctx context.Context, clusterID string) ([]runai.Project, error) {
			return api.ListProjects(ctx, clusterID, "")
		})
		if err != nil {
			return nil, fmt.Errorf("looking up the Run:ai project of namespace %s: %w", namespace, err)
		}
		ix = NewProjectIndex(list)
	}
	candidates := ix.ByNamespace[namespace]
	if p, ok := ix.ByName[namespace]; ok && p.BoundNamespace() != namespace {
		candidates = append(candidates, p)
	}
	return pickBound(candidates, namespace)
}

// pickBound chooses, among candidates, the project bound to namespace. A
// project that has the namespace's name but is bound elsewhere blocks the
// bind: creating ours would fail on the name, and adopting it would put the
// namespace in someone else's queue.
func pickBound(candidates []runai.Project, namespace string) (*runai.Project, error) {
	var bound []runai.Project
	for _, p := range candidates {
		if p.Status.Phase == runai.PhaseDeleting || p.Status.Phase == runai.PhaseDeleted {
			continue
		}
		switch ns := p.BoundNamespace(); {
		case ns == namespace:
			bound = append(bound, p)
		case p.Name == namespace:
			where := ns
			if where == "" {
				where = "runai-" + p.Name + " (Run:ai's default)"
			}
			return nil, &Refusal{Message: fmt.Sprintf(
				"Run:ai project %s (id %s) exists but is bound to namespace %s; a Run:ai administrator must rename or rebind it", p.Name, p.ID, where)}
		}
	}
	switch len(bound) {
	case 0:
		return nil, nil
	case 1:
		return &bound[0], nil
	}
	names := make([]string, len(bound))
	for i, p := range bound {
		names[i] = p.Name
	}
	return nil, &Refusal{Message: fmt.Sprintf("namespace %s is bound to several Run:ai projects (%s); a Run:ai administrator must keep one", namespace, strings.Join(names, ", "))}
}

// namespaceForBind is the namespace a bind starts from: from Namespaces
// when it shows a managed namespace that is neither bound nor being deleted,
// else a live read.
func (b *Binder) namespaceForBind(ctx context.Context, name string) (nsview.Namespace, error) {
	if b.Namespaces != nil {
		if v, found, err := b.Namespaces.Get(ctx, name); err == nil && found && !v.Terminating && b.Keys.Managed(v) && b.Keys.BoundProject(v) == "" {
			return v, nil
		}
	}
	return b.readNamespace(ctx, name)
}

// bind does one bind; ix is the pass's project index, nil in admission.
func (b *Binder) bind(ctx context.Context, namespace string, ix *ProjectIndex) (Outcome, error) {
	ns, err := b.namespaceForBind(ctx, namespace)
	if err != nil {
		return Outcome{}, err
	}
	if p := b.Keys.BoundProject(ns); p != "" {
		return Outcome{Namespace: namespace, Project: p, ProjectID: b.Keys.OwnedProjectID(ns), Adopted: b.Keys.OwnedProjectID(ns) == "", AlreadyBound: true, Ready: true}, nil
	}
	if ns.Terminating {
		return Outcome{}, &Refusal{Message: fmt.Sprintf("namespace %s is being deleted", namespace)}
	}
	hd, err := b.Keys.HopsworksDepartment(ns)
	if err != nil {
		return Outcome{}, &Refusal{Message: err.Error()}
	}
	cluster, err := b.Cluster(ctx)
	if err != nil {
		return Outcome{}, err
	}
	existing, err := b.findBound(ctx, cluster.UUID, namespace, ix)
	if err != nil {
		return Outcome{}, err
	}
	if existing != nil {
		// Ours (an earlier bind created it and was cut before the patch, or
		// the namespace was deleted and made again) or someone else's to
		// adopt: record writes the finalizer only for ours.
		return b.record(ctx, ns, *existing, b.departmentName(ctx, existing.ParentID, ix))
	}
	dept, err := b.mapDepartment(ctx, cluster.UUID, hd, ix)
	if err != nil {
		return Outcome{}, err
	}
	pool, err := b.NodePool(ctx, cluster.UUID)
	if err != nil {
		return Outcome{}, err
	}
	created, err := b.RunAI.CreateProject(ctx, NewProjectRequest(cluster.UUID, dept.ID, namespace, pool, b.GPUQuota))
	switch {
	case runai.IsConflict(err):
		// Another replica (or a lost response of ours) created it first.
		list, lerr := b.RunAI.ListProjects(ctx, cluster.UUID, namespace)
		if lerr != nil {
			return Outcome{}, fmt.Errorf("re-reading Run:ai project %s after a conflict: %w", namespace, lerr)
		}
		found, perr := pickBound(list, namespace)
		if perr != nil {
			return Outcome{}, perr
		}
		if found == nil {
			// The namespace is bound to a project with another name.
			all, aerr := b.RunAI.ListProjects(ctx, cluster.UUID, "")
			if aerr != nil {
				return Outcome{}, fmt.Errorf("listing Run:ai projects after a conflict: %w", aerr)
			}
			if found, perr = pickBound(NewProjectIndex(all).ByNamespace[namespace], namespace); perr != nil {
				return Outcome{}, perr
			}
			if found == nil {
				return Outcome{}, fmt.Errorf("creating Run:ai project %s: %w (and no project bound to the namespace was found)", namespace, err)
			}
		}
		created = *found
	case err != nil:
		return Outcome{}, fmt.Errorf("creating Run:ai project %s in department %s: %w", namespace, dept.Name, err)
	}
	created = b.waitReady(ctx, created)
	deptName := dept.Name
	if created.ParentID != dept.ID { // found after a conflict, made elsewhere
		deptName = b.departmentName(ctx, created.ParentID, ix)
	}
	return b.record(ctx, ns, created, deptName)
}

// departmentName is the name of department id, for an Outcome: from the
// pass's index or the lookup cache, else one read. When Run:ai does not
// answer it returns the id: the name is for people, the bind stands.
func (b *Binder) departmentName(ctx context.Context, id string, ix *ProjectIndex) string {
	if id == "" {
		return ""
	}
	if ix != nil && ix.DeptByID != nil {
		if d, ok := ix.DeptByID[id]; ok {
			return d.Name
		}
	}
	b.cache.mu.Lock()
	for _, e := range b.cache.depts {
		if e.ok && e.dept.ID == id && time.Since(e.at) < lookupTTL {
			b.cache.mu.Unlock()
			return e.dept.Name
		}
	}
	b.cache.mu.Unlock()
	d, err := b.RunAI.GetDepartment(ctx, id)
	if err != nil || d.Name == "" {
		return id
	}
	return d.Name
}

// NewProjectRequest is the project we create for namespace: named after it,
// bound to it, in department deptID, with quota deserved GPUs on the default
// node pool, and our ownership marker.
func NewProjectRequest(clusterID, deptID, namespace string, pool runai.NodePool, quota float64) runai.ProjectCreationRequest {
	q := quota
	return runai.ProjectCreationRequest{
		Name: namespace, ClusterID: clusterID, ParentID: &deptID, RequestedNamespace: namespace,
		Description: OwnerMarker(namespace),
		Resources:   []runai.Resources{{NodePool: &runai.NodePoolRef{ID: pool.ID, Name: pool.Name}, GPU: runai.ResourceAmount{Deserved: &q}}},
	}
}

// waitReady polls p until Ready, the ready timeout, or ctx's end, and returns
// its last known state. A project that is not Ready yet is still bound: its
// pods wait in the queue, which is what Run:ai would do with them anyway.
func (b *Binder) waitReady(ctx context.Context, p runai.Project) runai.Project {
	if p.Status.Phase == runai.PhaseReady {
		return p
	}
	timeout := b.ReadyTimeout
	if dl, ok := ctx.Deadline(); ok {
		// Leave time for the namespace patch after the wait.
		if left := time.Until(dl) - 500*time.Millisecond; left < timeout {
			timeout = left
		}
	}
	if timeout <= 0 {
		return p
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	poll := b.PollInterval
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-wctx.Done():
			return p
		case <-t.C:
			got, err := b.RunAI.GetProject(wctx, p.ID)
			if err != nil {
				continue
			}
			p = got
			if p.Status.Phase == runai.PhaseReady {
				return p
			}
		}
	}
}

// record writes the binding on the namespace in one strategic-merge patch:
// the queue label always; for a project we created, the project-id label and
// our finalizer too (a stale project-id label of an adopted project is
// removed). It is the bind's only Kubernetes write. Labels merge key by key
// and metadata.finalizers has patchStrategy merge, so the patch adds our
// finalizer without dropping another controller's and needs neither a read
// nor an optimistic lock; two replicas recording the same binding write the
// same patch. A project is never half recorded: the finalizer that deletes an
// owned project with its namespace comes with the labels that say it is ours.
func (b *Binder) record(ctx context.Context, ns nsview.Namespace, p runai.Project, deptName string) (Outcome, error) {
	owned := CreatedByUs(p, ns.Name)
	obj := &corev1.Namespace{}
	obj.Name = ns.Name
	if err := b.Client.Patch(ctx, obj, client.RawPatch(types.StrategicMergePatchType, b.bindingPatch(p, owned))); err != nil {
		return Outcome{}, b.recordFailed(ctx, ns.Name, p, owned, err)
	}
	if was, now := ns.Labels[b.Keys.Department], obj.Labels[b.Keys.Department]; owned && was != now {
		// The bind mapped the department the namespace had when it started.
		b.event(obj, corev1.EventTypeWarning, "DepartmentChangedDuringBind",
			"label %s changed from %q to %q while the namespace was being bound; Run:ai project %s was created for %q (the background pass reports the drift)", b.Keys.Department, was, now, p.Name, was)
		b.Log.Info("department changed during bind", "namespace", ns.Name, "was", was, "now", now, "project", p.Name)
	}
	out := Outcome{Namespace: ns.Name, Project: p.Name, ProjectID: p.ID, Department: deptName, Adopted: !owned, Ready: p.Status.Phase == runai.PhaseReady}
	if owned {
		b.event(obj, corev1.EventTypeNormal, "Bound", "created Run:ai project %s (id %s) and bound the namespace to it", p.Name, p.ID)
		b.observe("created")
	} else {
		b.event(obj, corev1.EventTypeNormal, "Adopted", "adopted Run:ai project %s (id %s), already bound to the namespace; it will never be deleted or moved by runai-webhook", p.Name, p.ID)
		b.observe("adopted")
	}
	b.Log.Info("bound namespace", "namespace", ns.Name, "project", p.Name, "projectID", p.ID, "adopted", !owned)
	return out, nil
}

// bindingPatch is record's strategic-merge patch.
func (b *Binder) bindingPatch(p runai.Project, owned bool) []byte {
	if !owned {
		return fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q,%q:null}}}`, b.Keys.Queue, p.Name, nsview.ProjectIDLabel)
	}
	return fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q,%q:%q},"finalizers":[%q]}}`, b.Keys.Queue, p.Name, nsview.ProjectIDLabel, p.ID, Finalizer)
}

// recordFailed explains a failed binding patch. A project of ours whose
// namespace is gone or being deleted serves nothing, and no finalizer will
// delete it with the namespace (the API server adds none to a namespace being
// deleted): delete it now, best effort; if that fails the pass deletes it
// once the namespace is gone. Otherwise (the API server failed, the namespace
// lives) the project stays and the next bind or pass records it as ours.
func (b *Binder) recordFailed(ctx context.Context, namespace string, p runai.Project, owned bool, perr error) error {
	err := fmt.Errorf("labelling namespace %s with %s=%s: %w", namespace, b.Keys.Queue, p.Name, perr)
	if !owned {
		return err
	}
	leaving, rerr := b.namespaceLeaving(ctx, namespace)
	if rerr != nil || !leaving {
		return err
	}
	msg := fmt.Sprintf("namespace %s was deleted while it was being bound (%v)", namespace, perr)
	if derr := b.RunAI.DeleteProject(ctx, p.ID); derr != nil && !runai.IsNotFound(derr) {
		b.Log.Info("could not delete the Run:ai project of a namespace deleted during its bind; the background pass deletes it", "namespace", namespace, "project", p.Name, "projectID", p.ID, "error", derr.Error())
		return &Refusal{Message: fmt.Sprintf("%s; deleting Run:ai project %s (id %s), created for it, failed too (%v): the background pass deletes it once the namespace is gone", msg, p.Name, p.ID, derr)}
	}
	b.Log.Info("deleted the Run:ai project of a namespace deleted during its bind", "namespace", namespace, "project", p.Name, "projectID", p.ID)
	return &Refusal{Message: fmt.Sprintf("%s; deleted Run:ai project %s (id %s), created for it", msg, p.Name, p.ID)}
}

// namespaceLeaving reports, from a live read, whether namespace is gone or
// being deleted.
func (b *Binder) namespaceLeaving(ctx context.Context, name string) (bool, error) {
	var ns corev1.Namespace
	err := b.Reader.Get(ctx, client.ObjectKey{Name: name}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return ns.DeletionTimestamp != nil, nil
}

func (b *Binder) event(obj *corev1.Namespace, kind, reason, format string, a ...any) {
	if b.Events != nil {
		b.Events.Eventf(obj, kind, reason, format, a...)
	}
}
