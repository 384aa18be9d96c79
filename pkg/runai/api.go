package runai

import "context"

// API is what the rest of the webhook needs from the Run:ai control plane.
// *Client implements it; tests and the binder depend on this interface so a
// decision can be exercised without a network.
type API interface {
	// Cluster returns the configured cluster (by name, or the only one).
	Cluster(ctx context.Context) (Cluster, error)
	// DefaultNodePool returns the node pool of the cluster marked isDefault.
	DefaultNodePool(ctx context.Context, clusterID string) (NodePool, error)
	// ListDepartments lists the cluster's departments (verbosity=verbose, all pages).
	// A non-empty name filters with filterBy=name==<name>.
	ListDepartments(ctx context.Context, clusterID, name string) ([]Department, error)
	GetDepartment(ctx context.Context, id string) (Department, error)
	// ListProjects lists the cluster's projects, all pages. A non-empty name filters by name.
	ListProjects(ctx context.Context, clusterID, name string) ([]Project, error)
	GetProject(ctx context.Context, id string) (Project, error)
	CreateProject(ctx context.Context, req ProjectCreationRequest) (Project, error)
	// DeleteProject asks for the deletion (202 or 204) and returns; it does not wait.
	DeleteProject(ctx context.Context, id string) error
	// WaitProjectGone polls until GetProject answers 404 or ctx ends.
	WaitProjectGone(ctx context.Context, id string) error
	// FreeGPUs returns FREE_GPUS of one node pool from /api/v1/nodes/telemetry.
	FreeGPUs(ctx context.Context, clusterID, nodePoolName string) (float64, error)
}
