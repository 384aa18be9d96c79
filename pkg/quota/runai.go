package quota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// Lookups are the cached Run:ai facts a source needs (the binder has them).
type Lookups interface {
	Cluster(ctx context.Context) (runai.Cluster, error)
	NodePool(ctx context.Context, clusterID string) (runai.NodePool, error)
}

// RunAISource reads project quotas from Run:ai and caches them per namespace.
type RunAISource struct {
	API     runai.API
	Lookups Lookups

	mu    sync.Mutex
	cache map[string]ProjectQuota
}

// ProjectQuota implements Source.
func (s *RunAISource) ProjectQuota(ctx context.Context, namespace, project, projectID string, fresh bool) (ProjectQuota, error) {
	if !fresh {
		s.mu.Lock()
		q, ok := s.cache[namespace]
		s.mu.Unlock()
		if ok && q.Project == project {
			return q, nil
		}
	}
	q, err := s.read(ctx, project, projectID)
	if err != nil {
		return ProjectQuota{}, err
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[string]ProjectQuota{}
	}
	s.cache[namespace] = q
	s.mu.Unlock()
	return q, nil
}

// Forget drops a namespace's cached quota (after a move or an unbind).
func (s *RunAISource) Forget(namespace string) {
	s.mu.Lock()
	delete(s.cache, namespace)
	s.mu.Unlock()
}

func (s *RunAISource) read(ctx context.Context, project, projectID string) (ProjectQuota, error) {
	cluster, err := s.Lookups.Cluster(ctx)
	if err != nil {
		return ProjectQuota{}, err
	}
	pool, err := s.Lookups.NodePool(ctx, cluster.UUID)
	if err != nil {
		return ProjectQuota{}, err
	}
	var p runai.Project
	if projectID != "" {
		if p, err = s.API.GetProject(ctx, projectID); err != nil {
			return ProjectQuota{}, err
		}
	} else {
		list, err := s.API.ListProjects(ctx, cluster.UUID, project)
		if err != nil {
			return ProjectQuota{}, err
		}
		found := false
		for _, c := range list {
			if c.Name == project {
				p, found = c, true
			}
		}
		if !found {
			return ProjectQuota{}, fmt.Errorf("Run:ai project %s not found", project)
		}
	}
	return FromProject(p, pool), nil
}

// FromProject reads a project's deserved and non-preemptible allocated GPUs
// on the given (default) node pool.
func FromProject(p runai.Project, pool runai.NodePool) ProjectQuota {
	q := ProjectQuota{Project: p.Name, ReadAt: time.Now()}
	for _, r := range p.Resources {
		if r.NodePool != nil && (r.NodePool.ID == pool.ID || (r.NodePool.ID == "" && r.NodePool.Name == pool.Name)) {
			q.Deserved = r.DeservedGPU()
		}
	}
	for _, st := range p.Status.NodePoolQuotaStatuses {
		if (st.NodePoolID == pool.ID || st.NodePoolName == pool.Name) && st.AllocatedNonPreemptible != nil {
			q.AllocatedNonPreemptible = st.AllocatedNonPreemptible.GPU
		}
	}
	return q
}
