package bind

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// MovePlan is what a department change of a namespace means in Run:ai. It is
// decided (DecideMove, pure) before anything is touched, so a dry run shows
// exactly what the real change would do.
type MovePlan struct {
	Action  MoveAction
	Project runai.Project
	From    runai.Department
	To      runai.Department
	// Blocking lists pods that run or wait in the namespace (for a refusal).
	Blocking []string
}

// MoveAction is the outcome of DecideMove.
type MoveAction int

// The branches of the seed's move rules.
const (
	MoveNothingUnbound  MoveAction = iota // the namespace is not bound yet
	MoveNothingAdopted                    // adopted projects are never moved (drift until an admin moves it)
	MoveNothingSameDept                   // both departments map to the same Run:ai department
	MoveNothingDone                       // the project already sits in the target department (a retried request)
	MoveRefusedPods                       // pods run or wait in the namespace
	MoveRecreate                          // delete and create again in the new department, no GPU quota
)

// DecideMove applies the seed's rules in order: nothing for an unbound
// namespace, an adopted project, or an unchanged Run:ai department;
// otherwise refused while pods run or wait; otherwise re-create.
func DecideMove(bound, owned bool, p runai.Project, from, to runai.Department, activePods []string) MovePlan {
	plan := MovePlan{Project: p, From: from, To: to}
	switch {
	case !bound:
		plan.Action = MoveNothingUnbound
	case !owned:
		plan.Action = MoveNothingAdopted
	case from.ID == to.ID:
		plan.Action = MoveNothingSameDept
	case p.ParentID == to.ID:
		plan.Action = MoveNothingDone
	case len(activePods) > 0:
		plan.Action, plan.Blocking = MoveRefusedPods, activePods
	default:
		plan.Action = MoveRecreate
	}
	return plan
}

// moveTimeout bounds a move inside the namespace webhook (timeout 30 s).
const moveTimeout = 27 * time.Second

// restoreReserve is the part of a move's time kept for the way back: the
// forward steps (delete, wait, create in the new department) stop this long
// before the move's deadline, so that with a slow Run:ai the project can
// still be created again in its old department, instead of the restore
// running on an expired context (or the webhook answering after the API
// server gave up and refused the label change of a move that happened).
const restoreReserve = 9 * time.Second

// movedMemoTTL is how long a finished move is remembered. Our own write of
// the ownership label makes the API server's first attempt at the label
// change conflict; it retries the PATCH and calls the webhook again, which
// must then answer "done" at once: a Run:ai read there, with Run:ai slow,
// could push the request past the webhook timeout.
const movedMemoTTL = 2 * time.Minute

type movedEntry struct {
	projectID, deptID string
	at                time.Time
}

// Move implements validate.Mover: it moves namespace's Run:ai project when
// its Hopsworks department changes from fromDept to toDept ("" = default),
// before the API server records the label change. On dryRun it only says
// what would happen.
func (b *Binder) Move(ctx context.Context, namespace, fromDept, toDept string, dryRun bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	plan, err := b.planMove(ctx, namespace, fromDept, toDept)
	if err != nil {
		return nil, err
	}
	prefix := "runai-webhook: "
	if dryRun {
		prefix = "runai-webhook (dry run): "
	}
	switch plan.Action {
	case MoveNothingUnbound:
		return []string{prefix + fmt.Sprintf("namespace %s is not bound to Run:ai yet; nothing moves in Run:ai, and it will be bound in department %s", namespace, plan.To.Name)}, nil
	case MoveNothingAdopted:
		return []string{prefix + fmt.Sprintf("Run:ai project %s was adopted, not created by Hopsworks: it stays in department %s and reports %s until a Run:ai administrator moves it to %s",
			plan.Project.Name, plan.From.Name, StatusDrift, plan.To.Name)}, nil
	case MoveNothingSameDept:
		return []string{prefix + fmt.Sprintf("both departments map to Run:ai department %s; nothing changes in Run:ai", plan.To.Name)}, nil
	case MoveNothingDone:
		// The API server re-runs admission when our own label write made
		// its first attempt conflict; the move is done, say nothing twice.
		return nil, nil
	case MoveRefusedPods:
		return nil, fmt.Errorf("namespace %s cannot move to department %s while %d pod(s) run or wait in it (%s); stop them first",
			namespace, orDefault(toDept), len(plan.Blocking), strings.Join(plan.Blocking[:min(5, len(plan.Blocking))], ", ")+more(len(plan.Blocking), 5))
	}
	if dryRun {
		return []string{prefix + fmt.Sprintf("would delete Run:ai project %s (id %s) in department %s and create it again in department %s with no GPU quota; its access rules, limits and node-pool settings would be lost",
			plan.Project.Name, plan.Project.ID, plan.From.Name, plan.To.Name)}, nil
	}
	return b.recreate(ctx, namespace, plan)
}

func orDefault(d string) string {
	if d == "" {
		return "(default)"
	}
	return d
}

func more(n, shown int) string {
	if n > shown {
		return fmt.Sprintf(" and %d more", n-shown)
	}
	return ""
}

func (b *Binder) planMove(ctx context.Context, namespace, fromDept, toDept string) (MovePlan, error) {
	ns, err := b.readNamespace(ctx, namespace)
	if err != nil {
		return MovePlan{}, err
	}
	cluster, err := b.Cluster(ctx)
	if err != nil {
		return MovePlan{}, fmt.Errorf("moving namespace %s: %w", namespace, err)
	}
	from, err := b.MapDepartment(ctx, cluster.UUID, fromDept)
	if err != nil {
		return MovePlan{}, err
	}
	to, err := b.MapDepartment(ctx, cluster.UUID, toDept)
	if err != nil {
		return MovePlan{}, err
	}
	bound := b.Keys.BoundProject(ns) != ""
	id := b.Keys.OwnedProjectID(ns)
	if m, ok := b.moved.Load(namespace); ok && bound && id != "" && from.ID != to.ID {
		if e := m.(movedEntry); e.projectID == id && e.deptID == to.ID && time.Since(e.at) < movedMemoTTL {
			return MovePlan{Action: MoveNothingDone, From: from, To: to}, nil
		}
	}
	var p runai.Project
	if bound && id != "" {
		if p, err = b.RunAI.GetProject(ctx, id); err != nil {
			return MovePlan{}, fmt.Errorf("reading Run:ai project %s of namespace %s: %w", id, namespace, err)
		}
		if !CreatedByUs(p, namespace) {
			id = "" // the label says ours, Run:ai says otherwise: treat as adopted
		}
	}
	var active []string
	if bound && id != "" && from.ID != to.ID && p.ParentID != to.ID {
		if active, err = b.activePods(ctx, namespace); err != nil {
			return MovePlan{}, err
		}
	}
	return DecideMove(bound, id != "", p, from, to, active), nil
}

// activePods lists the pods that run or wait in namespace (live read).
func (b *Binder) activePods(ctx context.Context, namespace string) ([]string, error) {
	var pods corev1.PodList
	if err := b.Reader.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing pods of namespace %s: %w", namespace, err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names, nil
}

// recreate deletes the project and creates it again in the new department
// with no GPU quota (so the old quota is not taken from the new department's
// share). When the new one cannot be created, it creates the project again
// in the old department with its old quota and scheduling settings and
// refuses the move.
func (b *Binder) recreate(ctx context.Context, namespace string, plan MovePlan) ([]string, error) {
	old := plan.Project
	fwd, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		fwd, cancel = context.WithDeadline(ctx, dl.Add(-restoreReserve))
	}
	defer cancel()
	if err := b.RunAI.DeleteProject(fwd, old.ID); err != nil {
		// The delete may have happened with its answer lost: look before
		// saying that nothing changed.
		switch b.projectState(ctx, old.ID) {
		case projectPresent:
			return nil, fmt.Errorf("moving Run:ai project %s: deleting it failed, nothing changed: %w", old.Name, err)
		case projectUnknown:
			return nil, b.restore(ctx, namespace, plan, fmt.Errorf("deleting it: %w", err))
		}
		b.Log.Info("the delete of a moving project reported an error, but the project is gone; going on", "namespace", namespace, "project", old.Name, "error", err.Error())
	}
	if err := b.RunAI.WaitProjectGone(fwd, old.ID); err != nil {
		// The delete was accepted; restoring is the safe way back.
		return nil, b.restore(ctx, namespace, plan, fmt.Errorf("waiting for the deletion: %w", err))
	}
	cluster, err := b.Cluster(fwd)
	if err != nil {
		return nil, b.restore(ctx, namespace, plan, err)
	}
	pool, err := b.NodePool(fwd, cluster.UUID)
	if err != nil {
		return nil, b.restore(ctx, namespace, plan, err)
	}
	created, err := b.RunAI.CreateProject(fwd, NewProjectRequest(cluster.UUID, plan.To.ID, namespace, pool, 0))
	if err != nil {
		// A create whose answer was lost (or cut by the deadline) may have
		// happened: then the move is done.
		if p, ok := b.findOwn(ctx, cluster.UUID, namespace); ok && p.ParentID == plan.To.ID {
			b.Log.Info("the create of a moving project reported an error, but it exists in the new department", "namespace", namespace, "project", p.Name, "error", err.Error())
			created, err = p, nil
		}
	}
	if err != nil {
		return nil, b.restore(ctx, namespace, plan, err)
	}
	created = b.waitReady(fwd, created)
	if err := b.relabelID(ctx, namespace, created.ID); err != nil {
		return nil, err
	}
	b.moved.Store(namespace, movedEntry{projectID: created.ID, deptID: plan.To.ID, at: time.Now()})
	b.observe("moved")
	b.Log.Info("moved Run:ai project", "namespace", namespace, "project", created.Name, "from", plan.From.Name, "to", plan.To.Name, "oldID", old.ID, "newID", created.ID)
	return []string{fmt.Sprintf("runai-webhook: moved Run:ai project %s from department %s to department %s (deleted and created again, new id %s) with no GPU quota; re-add the project's GPU quota and access rules in Run:ai",
		created.Name, plan.From.Name, plan.To.Name, created.ID)}, nil
}

// restore creates the project again in its old department with its old
// resources and scheduling settings, and returns the refusal of the move.
func (b *Binder) restore(ctx context.Context, namespace string, plan MovePlan, cause error) error {
	old := plan.Project
	req := runai.ProjectCreationRequest{
		Name: old.Name, ClusterID: old.ClusterID, ParentID: &plan.From.ID, RequestedNamespace: namespace,
		Description: OwnerMarker(namespace), Resources: old.Resources,
		SchedulingRules: old.SchedulingRules, DefaultNodePools: old.DefaultNodePools, NodeTypes: old.NodeTypes,
	}
	restored, err := b.RunAI.CreateProject(ctx, req)
	if err != nil {
		// Its answer lost, or the project never went away: look.
		if p, ok := b.findOwn(ctx, old.ClusterID, namespace); ok && p.ParentID == plan.From.ID {
			restored, err = p, nil
		}
	}
	if err != nil {
		b.observe("failed")
		return fmt.Errorf("moving Run:ai project %s to department %s failed (%v), and creating it again in department %s failed too (%v); the background pass will bind the namespace again",
			old.Name, plan.To.Name, cause, plan.From.Name, err)
	}
	b.observe("failed")
	if restored.ID == old.ID {
		return fmt.Errorf("moving Run:ai project %s to department %s failed: %v; the project was not deleted, nothing changed, and the department label was not changed",
			old.Name, plan.To.Name, cause)
	}
	if err := b.relabelID(ctx, namespace, restored.ID); err != nil {
		return err
	}
	return fmt.Errorf("moving Run:ai project %s to department %s failed: %v; it was created again in department %s with its old quota and scheduling settings (its access rules were not restored), and the department label was not changed",
		old.Name, plan.To.Name, cause, plan.From.Name)
}

// relabelID points the namespace's ownership label at the new project.
func (b *Binder) relabelID(ctx context.Context, namespace, id string) error {
	obj := &corev1.Namespace{}
	obj.Name = namespace
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, "hopsworks.ai/runai-project-id", id)
	if err := b.Client.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("recording the new Run:ai project id %s on namespace %s: %w", id, namespace, err)
	}
	return nil
}

// projectState is what a re-read says of a project after a failed call.
type projectState int

const (
	projectUnknown projectState = iota // the re-read failed too
	projectPresent
	projectGone // not found, or being deleted
)

func (b *Binder) projectState(ctx context.Context, id string) projectState {
	p, err := b.RunAI.GetProject(ctx, id)
	switch {
	case runai.IsNotFound(err):
		return projectGone
	case err != nil:
		return projectUnknown
	case p.Status.Phase == runai.PhaseDeleting || p.Status.Phase == runai.PhaseDeleted:
		return projectGone
	}
	return projectPresent
}

// findOwn returns the project we created for namespace, if Run:ai has it.
func (b *Binder) findOwn(ctx context.Context, clusterID, namespace string) (runai.Project, bool) {
	if clusterID == "" {
		c, err := b.Cluster(ctx)
		if err != nil {
			return runai.Project{}, false
		}
		clusterID = c.UUID
	}
	list, err := b.RunAI.ListProjects(ctx, clusterID, namespace)
	if err != nil {
		return runai.Project{}, false
	}
	for _, p := range list {
		if p.Name == namespace && CreatedByUs(p, namespace) && p.BoundNamespace() == namespace &&
			p.Status.Phase != runai.PhaseDeleting && p.Status.Phase != runai.PhaseDeleted {
			return p, true
		}
	}
	return runai.Project{}, false
}
