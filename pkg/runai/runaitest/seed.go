package runaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Defaults applied by Seed.WithDefaults. They are exported so tests can build
// client configurations without repeating literals.
const (
	DefaultClusterName  = "sim-cluster"
	DefaultClusterUUID  = "5a3f4d8e-5b6c-4d7e-8f90-a1b2c3d4e5f6"
	DefaultTenantID     = 1001
	DefaultClientID     = "runai-sim"
	DefaultClientSecret = "runai-sim-secret"
	DefaultTokenTTL     = time.Hour
	DefaultDepartment   = "default"
	DefaultNodePool     = "default"
	DefaultGPUs         = 8
	// DefaultPageSize and MaxPageSize mirror the vendor's Limit parameter
	// (default 50, maximum 500).
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// nameRE is the project name rule: a DNS-1123 label that starts with a letter,
// at most 63 characters (vendor docs; see API-NOTES §7). Department names use
// the same rule.
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// namespaceRE is the Kubernetes rule for a namespace name (DNS-1123 label).
var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func validName(s string) bool      { return len(s) <= 63 && nameRE.MatchString(s) }
func validNamespace(s string) bool { return len(s) <= 63 && namespaceRE.MatchString(s) }

// Seed is the initial state of a simulated control plane. The zero value is a
// usable control plane: one cluster, the "default" department, a "default"
// node pool with DefaultGPUs GPUs, default credentials, no delays. It loads
// from YAML (LoadSeed), where durations are Go duration strings ("2s").
type Seed struct {
	Cluster      ClusterSeed `json:"cluster"`
	ClientID     string      `json:"clientId"`
	ClientSecret string      `json:"clientSecret"`
	// TokenTTL is the lifetime of issued tokens (expires_in / expiresIn).
	TokenTTL time.Duration `json:"tokenTTL"`
	// Departments are created in order after "default", which always exists.
	Departments []DepartmentSeed `json:"departments"`
	// NodePools of the cluster. A pool named "default" marked isDefault is
	// added when no pool is marked default, because every Run:ai cluster has one.
	NodePools []NodePoolSeed `json:"nodePools"`
	// Projects exist (Ready, namespace bound) from the start: the adoption case.
	Projects []ProjectSeed `json:"projects"`
	// CreateDelay is how long a new project stays Creating, with
	// status.namespace unset, before it is Ready and bound.
	CreateDelay time.Duration `json:"createDelay"`
	// DeleteDelay is how long a deleted project stays Deleting (DELETE answers
	// 202); 0 removes it at once (DELETE answers 204).
	DeleteDelay time.Duration `json:"deleteDelay"`
	// V2TokenEnabled nil or true serves POST /api/v2/token; false answers 404
	// there, like control planes older than the OAuth2 endpoint.
	V2TokenEnabled *bool `json:"v2TokenEnabled,omitempty"`
	// MaxPageSize caps the items of one list page (vendor: 500). Smaller
	// values force clients through next-paging with few objects.
	MaxPageSize int `json:"maxPageSize"`
}

// ClusterSeed describes the one cluster of the tenant.
type ClusterSeed struct {
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	TenantID int32  `json:"tenantId"`
	Version  string `json:"version"`
}

// DepartmentSeed is a department and its deserved GPUs on the default node
// pool. In YAML a bare string is accepted as the name.
type DepartmentSeed struct {
	Name         string  `json:"name"`
	DeservedGPUs float64 `json:"deservedGPUs"`
}

// UnmarshalJSON accepts "name" as well as {"name": ..., "deservedGPUs": ...},
// so a seed can list departments tersely.
func (d *DepartmentSeed) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*d = DepartmentSeed{Name: name}
		return nil
	}
	type plain DepartmentSeed
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("department: %w", err)
	}
	*d = DepartmentSeed(p)
	return nil
}

// NodePoolSeed is a node pool. FreeGPUs nil means "total minus what projects
// have allocated on the pool"; a value pins it (SetFreeGPUs does the same).
type NodePoolSeed struct {
	Name      string   `json:"name"`
	IsDefault bool     `json:"isDefault"`
	TotalGPUs float64  `json:"totalGPUs"`
	FreeGPUs  *float64 `json:"freeGPUs,omitempty"`
}

// ProjectSeed is a project that already exists, bound to Namespace
// (runai-<name> when empty), on the default node pool.
type ProjectSeed struct {
	Name                    string  `json:"name"`
	Department              string  `json:"department"`
	Namespace               string  `json:"namespace"`
	DeservedGPUs            float64 `json:"deservedGPUs"`
	Allocated               float64 `json:"allocated"`
	AllocatedNonPreemptible float64 `json:"allocatedNonPreemptible"`
}

// seedYAML mirrors Seed with durations as strings, so a YAML seed reads
// "createDelay: 2s" instead of nanoseconds.
type seedYAML struct {
	Cluster        ClusterSeed      `json:"cluster"`
	ClientID       string           `json:"clientId"`
	ClientSecret   string           `json:"clientSecret"`
	TokenTTL       jsonDuration     `json:"tokenTTL"`
	Departments    []DepartmentSeed `json:"departments"`
	NodePools      []NodePoolSeed   `json:"nodePools"`
	Projects       []ProjectSeed    `json:"projects"`
	CreateDelay    jsonDuration     `json:"createDelay"`
	DeleteDelay    jsonDuration     `json:"deleteDelay"`
	V2TokenEnabled *bool            `json:"v2TokenEnabled,omitempty"`
	MaxPageSize    int              `json:"maxPageSize"`
}

// jsonDuration decodes "1.5s" (Go syntax) or a number of seconds.
type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = jsonDuration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration %s: want a string like \"2s\" or seconds", b)
	}
	*d = jsonDuration(time.Duration(secs * float64(time.Second)))
	return nil
}

func (d jsonDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads durations as strings ("2s") or seconds.
func (s *Seed) UnmarshalJSON(b []byte) error {
	var y seedYAML
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a typo in a seed should fail loudly, not be ignored
	if err := dec.Decode(&y); err != nil {
		return err
	}
	*s = Seed{
		Cluster: y.Cluster, ClientID: y.ClientID, ClientSecret: y.ClientSecret,
		TokenTTL: time.Duration(y.TokenTTL), Departments: y.Departments, NodePools: y.NodePools,
		Projects: y.Projects, CreateDelay: time.Duration(y.CreateDelay), DeleteDelay: time.Duration(y.DeleteDelay),
		V2TokenEnabled: y.V2TokenEnabled, MaxPageSize: y.MaxPageSize,
	}
	return nil
}

// MarshalJSON writes durations as strings, the form UnmarshalJSON reads.
func (s Seed) MarshalJSON() ([]byte, error) {
	return json.Marshal(seedYAML{
		Cluster: s.Cluster, ClientID: s.ClientID, ClientSecret: s.ClientSecret,
		TokenTTL: jsonDuration(s.TokenTTL), Departments: s.Departments, NodePools: s.NodePools,
		Projects: s.Projects, CreateDelay: jsonDuration(s.CreateDelay), DeleteDelay: jsonDuration(s.DeleteDelay),
		V2TokenEnabled: s.V2TokenEnabled, MaxPageSize: s.MaxPageSize,
	})
}

// ParseSeed reads a YAML (or JSON) seed, applies defaults and validates it.
func ParseSeed(data []byte) (Seed, error) {
	var s Seed
	if err := yaml.Unmarshal(data, &s); err != nil {
		return Seed{}, fmt.Errorf("parse seed: %w", err)
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return Seed{}, err
	}
	return s, nil
}

// LoadSeed reads a seed file; see ParseSeed.
func LoadSeed(path string) (Seed, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Seed{}, fmt.Errorf("read seed: %w", err)
	}
	s, err := ParseSeed(data)
	if err != nil {
		return Seed{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Bool returns a pointer to b, for Seed.V2TokenEnabled.
func Bool(b bool) *bool { return &b }

// WithDefaults fills every unset field with its default and makes sure the
// "default" department and a default node pool exist.
func (s Seed) WithDefaults() Seed {
	if s.Cluster.Name == "" {
		s.Cluster.Name = DefaultClusterName
	}
	if s.Cluster.UUID == "" {
		s.Cluster.UUID = DefaultClusterUUID
	}
	if s.Cluster.TenantID == 0 {
		s.Cluster.TenantID = DefaultTenantID
	}
	if s.Cluster.Version == "" {
		s.Cluster.Version = "2.22.0"
	}
	if s.ClientID == "" {
		s.ClientID = DefaultClientID
	}
	if s.ClientSecret == "" {
		s.ClientSecret = DefaultClientSecret
	}
	if s.TokenTTL <= 0 {
		s.TokenTTL = DefaultTokenTTL
	}
	if s.MaxPageSize <= 0 || s.MaxPageSize > MaxPageSize {
		s.MaxPageSize = MaxPageSize
	}
	hasDefaultDept := false
	for _, d := range s.Departments {
		hasDefaultDept = hasDefaultDept || d.Name == DefaultDepartment
	}
	if !hasDefaultDept {
		s.Departments = append([]DepartmentSeed{{Name: DefaultDepartment}}, s.Departments...)
	}
	hasDefaultPool, namedDefault := false, -1
	for i, p := range s.NodePools {
		hasDefaultPool = hasDefaultPool || p.IsDefault
		if p.Name == DefaultNodePool {
			namedDefault = i
		}
	}
	switch {
	case hasDefaultPool:
	case namedDefault >= 0:
		s.NodePools = append([]NodePoolSeed(nil), s.NodePools...)
		s.NodePools[namedDefault].IsDefault = true
	default:
		s.NodePools = append([]NodePoolSeed{{Name: DefaultNodePool, IsDefault: true, TotalGPUs: DefaultGPUs}}, s.NodePools...)
	}
	return s
}

// Validate reports the first inconsistency of a seed (after WithDefaults).
func (s Seed) Validate() error {
	if !looksLikeUUID(s.Cluster.UUID) {
		return fmt.Errorf("seed: cluster uuid %q is not a UUID (the vendor's clusterId is format uuid)", s.Cluster.UUID)
	}
	depts := map[string]bool{}
	for _, d := range s.Departments {
		if !validName(d.Name) {
			return fmt.Errorf("seed: department name %q breaks ^[a-z]([-a-z0-9]*[a-z0-9])?$ (max 63)", d.Name)
		}
		if depts[d.Name] {
			return fmt.Errorf("seed: department %q listed twice", d.Name)
		}
		depts[d.Name] = true
	}
	pools, defaults := map[string]bool{}, 0
	for _, p := range s.NodePools {
		if p.Name == "" || pools[p.Name] {
			return fmt.Errorf("seed: node pool name %q empty or listed twice", p.Name)
		}
		pools[p.Name] = true
		if p.IsDefault {
			defaults++
		}
		if p.TotalGPUs < 0 || (p.FreeGPUs != nil && *p.FreeGPUs < 0) {
			return fmt.Errorf("seed: node pool %q has negative GPUs", p.Name)
		}
	}
	if defaults != 1 {
		return fmt.Errorf("seed: %d node pools marked isDefault, want exactly 1", defaults)
	}
	names, nss := map[string]bool{}, map[string]bool{}
	for _, p := range s.Projects {
		if !validName(p.Name) {
			return fmt.Errorf("seed: project name %q breaks ^[a-z]([-a-z0-9]*[a-z0-9])?$ (max 63)", p.Name)
		}
		if names[p.Name] {
			return fmt.Errorf("seed: project %q listed twice", p.Name)
		}
		names[p.Name] = true
		if p.Department != "" && !depts[p.Department] {
			return fmt.Errorf("seed: project %q names unknown department %q", p.Name, p.Department)
		}
		ns := p.Namespace
		if ns == "" {
			ns = "runai-" + p.Name
		}
		if !validNamespace(ns) {
			return fmt.Errorf("seed: project %q namespace %q is not a valid namespace name", p.Name, ns)
		}
		if nss[ns] {
			return fmt.Errorf("seed: namespace %q bound to two projects", ns)
		}
		nss[ns] = true
	}
	return nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func looksLikeUUID(s string) bool { return uuidRE.MatchString(strings.TrimSpace(s)) }
