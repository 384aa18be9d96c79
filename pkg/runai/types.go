package runai

import (
	"encoding/json"
	"time"
)

// The types below carry exactly the fields of NVIDIA's Run:ai control-plane
// OpenAPI document (info.version "latest") that the integration reads or
// writes. Names and JSON tags follow the vendor schemas so the contract tests
// can validate both directions against the document. Unknown fields are
// ignored on decode, which keeps the client working across control-plane
// versions that add fields.

// Cluster is the vendor's DisplayedCluster. UUID is the clusterId that every
// org-unit call takes.
type Cluster struct {
	UUID      string         `json:"uuid"`
	TenantID  int32          `json:"tenantId"`
	Name      string         `json:"name"`
	CreatedAt time.Time      `json:"createdAt"`
	Domain    *string        `json:"domain,omitempty"`
	Version   *string        `json:"version,omitempty"`
	Status    *ClusterStatus `json:"status,omitempty"`
}

// ClusterStatus is the subset of ClusterDisplayedStatus we read.
type ClusterStatus struct {
	State string `json:"state,omitempty"`
}

// NodePool is the vendor's Nodepool. ID is what resources[].nodePool.id takes;
// defaultNodePools takes names.
type NodePool struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	ClusterID   string    `json:"clusterId"`
	ClusterName string    `json:"clusterName"`
	LabelKey    string    `json:"labelKey"`
	LabelValue  string    `json:"labelValue"`
	Phase       string    `json:"phase,omitempty"`
	IsDefault   bool      `json:"isDefault"`
	TenantID    int32     `json:"tenantId"`
	CreatedBy   string    `json:"createdBy"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedBy   string    `json:"updatedBy"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// NodePoolList is the body of GET /api/v1/node-pools.
type NodePoolList struct {
	NodePools []NodePool `json:"nodepools"`
}

// NodePoolRef names the node pool a Resources entry applies to.
type NodePoolRef struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// ResourceAmount is the vendor's Resource / NonNullResource: deserved quota,
// limit and over-quota weight of one resource kind on one node pool.
type ResourceAmount struct {
	Deserved        *float64 `json:"deserved,omitempty"`
	Limit           *float64 `json:"limit,omitempty"`
	OverQuotaWeight *float64 `json:"overQuotaWeight,omitempty"`
}

// MemoryAmount is a ResourceAmount with the units the vendor requires for memory.
type MemoryAmount struct {
	ResourceAmount
	Units string `json:"units"`
}

// Resources is one node pool's quota of a project or department.
type Resources struct {
	NodePool *NodePoolRef    `json:"nodePool,omitempty"`
	GPU      ResourceAmount  `json:"gpu"`
	CPU      *ResourceAmount `json:"cpu,omitempty"`
	Memory   *MemoryAmount   `json:"memory,omitempty"`
	Priority *string         `json:"priority,omitempty"`
}

// DeservedGPU returns the deserved GPUs of r, 0 when unset.
func (r Resources) DeservedGPU() float64 {
	if r.GPU.Deserved == nil {
		return 0
	}
	return *r.GPU.Deserved
}

// QuotaAmounts is the vendor's QuotaStatusResource.
type QuotaAmounts struct {
	GPU    float64 `json:"gpu"`
	CPU    float64 `json:"cpu,omitempty"`
	Memory float64 `json:"memory,omitempty"`
}

// QuotaStatus is allocation summed over node pools (or for one node pool).
type QuotaStatus struct {
	Allocated               *QuotaAmounts `json:"allocated,omitempty"`
	AllocatedNonPreemptible *QuotaAmounts `json:"allocatedNonPreemptible,omitempty"`
	Requested               *QuotaAmounts `json:"requested,omitempty"`
}

// NodePoolQuotaStatus is the vendor's QuotaStatusNodePool.
type NodePoolQuotaStatus struct {
	QuotaStatus
	NodePoolName string `json:"nodePoolName"`
	NodePoolID   string `json:"nodePoolId"`
}

// TotalResources is the sum of an org unit's quota over node pools.
type TotalResources struct {
	GPUQuota    *float64 `json:"gpuQuota,omitempty"`
	CPUQuota    *float64 `json:"cpuQuota,omitempty"`
	MemoryQuota *float64 `json:"memoryQuota,omitempty"`
}

// Project phases of the vendor's ProjectPhase enum.
const (
	PhaseCreating     = "Creating"
	PhaseUpdating     = "Updating"
	PhaseDeleting     = "Deleting"
	PhaseDeleted      = "Deleted"
	PhaseInitializing = "Initializing"
	PhaseReady        = "Ready"
	PhaseNotReady     = "NotReady"
	PhaseUnknown      = "Unknown"
)

// ProjectStatus is the vendor's ProjectStatus. Namespace is the namespace the
// cluster actually bound; it may be nil until the project is Ready.
type ProjectStatus struct {
	Namespace             *string               `json:"namespace,omitempty"`
	Phase                 string                `json:"phase,omitempty"`
	PhaseMessage          *string               `json:"phaseMessage,omitempty"`
	NodePoolQuotaStatuses []NodePoolQuotaStatus `json:"nodePoolQuotaStatuses,omitempty"`
	QuotaStatus           *QuotaStatus          `json:"quotaStatus,omitempty"`
}

// ProjectEffective is the vendor's ProjectEffective (settings after policy).
type ProjectEffective struct {
	SchedulingRules  json.RawMessage `json:"schedulingRules,omitempty"`
	DefaultNodePools []string        `json:"defaultNodePools,omitempty"`
	NodeTypes        json.RawMessage `json:"nodeTypes,omitempty"`
}

// Project is the vendor's Project. SchedulingRules and NodeTypes are kept as
// raw JSON: we never interpret them, only carry them over when a project is
// created again after a failed department move.
type Project struct {
	ID                    string           `json:"id"`
	Name                  string           `json:"name"`
	ClusterID             string           `json:"clusterId"`
	ParentID              string           `json:"parentId"`
	RequestedNamespace    *string          `json:"requestedNamespace,omitempty"`
	EnforceRunaiScheduler bool             `json:"enforceRunaiScheduler"`
	Description           string           `json:"description"`
	Status                ProjectStatus    `json:"status"`
	TotalResources        TotalResources   `json:"totalResources"`
	Resources             []Resources      `json:"resources"`
	Effective             ProjectEffective `json:"effective"`
	SchedulingRules       json.RawMessage  `json:"schedulingRules,omitempty"`
	DefaultNodePools      []string         `json:"defaultNodePools,omitempty"`
	NodeTypes             json.RawMessage  `json:"nodeTypes,omitempty"`
	CreatedAt             time.Time        `json:"createdAt"`
	UpdatedAt             time.Time        `json:"updatedAt"`
	CreatedBy             string           `json:"createdBy,omitempty"`
	UpdatedBy             string           `json:"updatedBy,omitempty"`
}

// BoundNamespace is the namespace the project is bound to: status.namespace
// when the cluster reported it, else the requested one.
func (p Project) BoundNamespace() string {
	if p.Status.Namespace != nil && *p.Status.Namespace != "" {
		return *p.Status.Namespace
	}
	if p.RequestedNamespace != nil {
		return *p.RequestedNamespace
	}
	return ""
}

// ProjectList is the body of GET /api/v1/org-unit/projects.
type ProjectList struct {
	Projects []Project `json:"projects"`
	Next     *int      `json:"next,omitempty"`
}

// ProjectCreationRequest is the body of POST /api/v1/org-unit/projects.
type ProjectCreationRequest struct {
	Name                  string          `json:"name"`
	ClusterID             string          `json:"clusterId"`
	ParentID              *string         `json:"parentId,omitempty"`
	RequestedNamespace    string          `json:"requestedNamespace,omitempty"`
	EnforceRunaiScheduler *bool           `json:"enforceRunaiScheduler,omitempty"`
	Description           string          `json:"description,omitempty"`
	Resources             []Resources     `json:"resources"`
	SchedulingRules       json.RawMessage `json:"schedulingRules,omitempty"`
	DefaultNodePools      []string        `json:"defaultNodePools,omitempty"`
	NodeTypes             json.RawMessage `json:"nodeTypes,omitempty"`
}

// DepartmentStatus is the status of a department (list with verbosity=verbose, or get).
type DepartmentStatus struct {
	QuotaStatus           *QuotaStatus          `json:"quotaStatus,omitempty"`
	NodePoolQuotaStatuses []NodePoolQuotaStatus `json:"nodePoolQuotaStatuses,omitempty"`
}

// Department is the vendor's Department / DepartmentForList.
type Department struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	ClusterID      string            `json:"clusterId"`
	Description    string            `json:"description,omitempty"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
	Status         *DepartmentStatus `json:"status,omitempty"`
	TotalResources *TotalResources   `json:"totalResources,omitempty"`
	Resources      []Resources       `json:"resources,omitempty"`
}

// DepartmentList is the body of GET /api/v1/org-unit/departments.
type DepartmentList struct {
	Departments []Department `json:"departments"`
	Next        *int         `json:"next,omitempty"`
}

// TelemetryResponse is the vendor's TelemetryResponse (values are strings).
type TelemetryResponse struct {
	Type      string           `json:"type"`
	Timestamp string           `json:"timestamp"`
	Values    []TelemetryValue `json:"values"`
}

// TelemetryValue is one value of a TelemetryResponse and the groups it belongs to.
type TelemetryValue struct {
	Value  string           `json:"value"`
	Groups []TelemetryGroup `json:"groups,omitempty"`
}

// TelemetryGroup is one grouping column of a TelemetryValue.
type TelemetryGroup struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Name  string `json:"name,omitempty"`
}

// APIError is the vendor's Error body.
type APIError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details string `json:"details,omitempty"`
}

// TokenRequestV1 is the body of POST /api/v1/token (JSON, camelCase).
type TokenRequestV1 struct {
	GrantType    string `json:"grantType"`
	ClientID     string `json:"clientID"`
	ClientSecret string `json:"clientSecret"`
}

// TokenResponseV1 is the body answered by POST /api/v1/token.
type TokenResponseV1 struct {
	AccessToken  string `json:"accessToken"`
	IDToken      string `json:"idToken,omitempty"`
	RefreshToken string `json:"refreshToken,omitempty"`
	ExpiresIn    int64  `json:"expiresIn,omitempty"`
}

// TokenResponseV2 is the OAuth2 body answered by POST /api/v2/token.
type TokenResponseV2 struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in,omitempty"`
	RefreshToken string `json:"refresh_token,omitempty"`
	IDToken      string `json:"id_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
}
