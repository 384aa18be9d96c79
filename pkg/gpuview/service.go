package gpuview

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/metrics"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// Lookups are the binder's cached, read-only Run:ai lookups. *bind.Binder
// implements it. Bind is deliberately not part of it: a view cannot bind.
type Lookups interface {
	Cluster(ctx context.Context) (runai.Cluster, error)
	NodePool(ctx context.Context, clusterID string) (runai.NodePool, error)
	MapDepartment(ctx context.Context, clusterID, hopsworksDept string) (runai.Department, error)
}

var _ Lookups = (*bind.Binder)(nil)

// Service reads what the views are computed from. It only reads: namespaces
// from Kubernetes (live, so a view never shows a binding older than the API
// server's), projects, departments and telemetry from Run:ai.
type Service struct {
	Keys              nsview.Keys
	Enabled           bool
	DefaultDepartment string
	// Namespaces reads namespaces; production passes the manager's API
	// reader (live reads, no cache lag).
	Namespaces client.Reader
	// RunAI is nil when the integration is off.
	RunAI   runai.API
	Lookups Lookups
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// NotFoundError is a namespace the view does not exist for: absent, or not a
// Hopsworks project. The handler answers 404 with Message.
type NotFoundError struct{ Message string }

func (e *NotFoundError) Error() string { return e.Message }

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Namespace reads and computes the GPU view of namespace name. It records the
// numbers it read in runai_webhook_project_gpus.
func (s *Service) Namespace(ctx context.Context, name string) (NamespaceView, error) {
	var ns corev1.Namespace
	if err := s.Namespaces.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			return NamespaceView{}, &NotFoundError{Message: fmt.Sprintf("namespace %s does not exist", name)}
		}
		return NamespaceView{}, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	v := bind.View(&ns)
	if !s.Keys.Managed(v) {
		return NamespaceView{}, &NotFoundError{Message: fmt.Sprintf(
			"namespace %s is not a Hopsworks project (no %s label): it has no Run:ai GPU view", name, s.Keys.Project)}
	}
	facts := NamespaceFacts{Namespace: v, Annotations: ns.Annotations, Enabled: s.Enabled}
	if NeedsRead(s.Keys, v, s.Enabled) {
		facts.Read, facts.ReadErr = s.readProject(ctx, v)
	}
	view := Namespace(s.Keys, facts)
	if view.NumbersRead() {
		metrics.SetProjectGPUs(view.Project, *view.Deserved, *view.Allocated)
	}
	return view, nil
}

// readProject reads the bound namespace's project, its department, the
// department the namespace maps to and the pool's free GPUs. An error means
// Run:ai could not be read (the view then says RUN_AI_UNREACHABLE); answers
// that are facts (project gone, default department missing, telemetry
// refused) are recorded in the result instead.
func (s *Service) readProject(ctx context.Context, ns nsview.Namespace) (*ProjectRead, error) {
	if s.RunAI == nil || s.Lookups == nil {
		return nil, errors.New("no Run:ai client is configured")
	}
	cluster, err := s.Lookups.Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the Run:ai cluster: %w", err)
	}
	pool, err := s.Lookups.NodePool(ctx, cluster.UUID)
	if err != nil {
		return nil, fmt.Errorf("reading the default node pool: %w", err)
	}
	r := &ProjectRead{Pool: pool}
	bound, id := s.Keys.BoundProject(ns), s.Keys.OwnedProjectID(ns)
	if id != "" {
		p, err := s.RunAI.GetProject(ctx, id)
		switch {
		case runai.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading Run:ai project %s: %w", bound, err)
		default:
			r.Project = &p
		}
	} else {
		list, err := s.RunAI.ListProjects(ctx, cluster.UUID, bound)
		if err != nil {
			return nil, fmt.Errorf("reading Run:ai project %s: %w", bound, err)
		}
		for i := range list {
			if list[i].Name == bound {
				r.Project = &list[i]
			}
		}
	}
	r.At = s.now()
	if hd, err := s.Keys.HopsworksDepartment(ns); err != nil {
		r.MapErr = err
	} else if d, err := s.Lookups.MapDepartment(ctx, cluster.UUID, hd); err != nil {
		if runai.IsUnavailable(err) {
			return nil, err
		}
		r.MapErr = err
	} else {
		r.Mapped = &d
	}
	if r.Project == nil {
		return r, nil
	}
	if r.Mapped != nil && r.Mapped.ID == r.Project.ParentID {
		r.ProjectDepartment = r.Mapped.Name
	} else if d, err := s.RunAI.GetDepartment(ctx, r.Project.ParentID); err == nil {
		r.ProjectDepartment = d.Name
	} else if runai.IsUnavailable(err) {
		return nil, fmt.Errorf("reading Run:ai department %s: %w", r.Project.ParentID, err)
	}
	free, err := s.RunAI.FreeGPUs(ctx, cluster.UUID, pool.Name)
	switch {
	case runai.IsUnavailable(err):
		return nil, fmt.Errorf("reading the free GPUs of node pool %s: %w", pool.Name, err)
	case err != nil:
		r.FreeErr = err
	default:
		r.FreeGPUs = &free
	}
	return r, nil
}

// Admin reads and computes the admin view: managed namespaces from
// Kubernetes, and every project and department of the cluster from Run:ai,
// each listed once.
func (s *Service) Admin(ctx context.Context) (AdminView, error) {
	var list corev1.NamespaceList
	if err := s.Namespaces.List(ctx, &list, client.HasLabels{s.Keys.Project}); err != nil {
		return AdminView{}, fmt.Errorf("listing namespaces: %w", err)
	}
	facts := AdminFacts{Enabled: s.Enabled, DefaultDepartment: s.DefaultDepartment}
	for i := range list.Items {
		ns := &list.Items[i]
		facts.Namespaces = append(facts.Namespaces, NamespaceInfo{Namespace: bind.View(ns), Annotations: ns.Annotations})
	}
	if s.Enabled {
		facts.Projects, facts.Departments, facts.ReadErr = s.readAll(ctx)
		facts.At = s.now()
	}
	return Admin(s.Keys, facts), nil
}

func (s *Service) readAll(ctx context.Context) ([]runai.Project, []runai.Department, error) {
	if s.RunAI == nil || s.Lookups == nil {
		return nil, nil, errors.New("no Run:ai client is configured")
	}
	cluster, err := s.Lookups.Cluster(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Run:ai cluster: %w", err)
	}
	projects, err := s.RunAI.ListProjects(ctx, cluster.UUID, "")
	if err != nil {
		return nil, nil, fmt.Errorf("listing Run:ai projects: %w", err)
	}
	depts, err := s.RunAI.ListDepartments(ctx, cluster.UUID, "")
	if err != nil {
		return nil, nil, fmt.Errorf("listing Run:ai departments: %w", err)
	}
	return projects, depts, nil
}
