package workload

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hopsworks/runai-webhook/pkg/internal/jsonscan"
)

// Decode reads a pod from its JSON form: the fields of Pod, and of each
// container's resources the GPU entries (nvidia.com/gpu) only, the one
// resource admission reads. Everything else (env, volumes, probes, other
// resources) is skipped unparsed: the input is validated once and walked
// with jsonscan, which makes decoding a notebook pod several times cheaper
// than encoding/json (see the benchmarks in pkg/mutate).
//
// The result is what encoding/json gives for the API server's encoding of a
// pod. Keys match exactly, as in the API server's own decoder; encoding/json
// would also accept case variants ("Metadata"), which the API server never
// sends. Of duplicate keys, which it never sends either, the last wins.
func Decode(raw []byte) (*Pod, error) {
	if !jsonscan.Valid(raw) {
		// encoding/json says what is wrong and where.
		err := json.Unmarshal(raw, &struct{}{})
		if err == nil {
			err = jsonscan.ErrMalformed
		}
		return nil, fmt.Errorf("decoding pod: %w", err)
	}
	p := &Pod{}
	if err := decodePod(raw, p); err != nil {
		return nil, fmt.Errorf("decoding pod: %w", err)
	}
	return p, nil
}

// typeError is a value of the wrong JSON type at path.
func typeError(path, want string) error {
	if path == "" {
		return fmt.Errorf("want %s", want)
	}
	return fmt.Errorf("%s: want %s", path, want)
}

func decodePod(b []byte, p *Pod) error {
	if jsonscan.IsNull(b) {
		return nil
	}
	it := jsonscan.Object(b)
	if it.Err() != nil {
		return typeError("pod", "an object")
	}
	for it.Next() {
		k, v := it.Key(), it.Value()
		var err error
		switch {
		case jsonscan.KeyIs(k, "metadata"):
			err = decodeMeta(v, &p.Metadata)
		case jsonscan.KeyIs(k, "spec"):
			err = decodeSpec(v, &p.Spec)
		case jsonscan.KeyIs(k, "status"):
			err = object(v, "status", func(k, v []byte) error {
				if jsonscan.KeyIs(k, "phase") {
					return str(v, "status.phase", (*string)(&p.Status.Phase))
				}
				return nil
			})
		}
		if err != nil {
			return err
		}
	}
	return it.Err()
}

func decodeMeta(b []byte, m *PodMeta) error {
	return object(b, "metadata", func(k, v []byte) error {
		switch {
		case jsonscan.KeyIs(k, "name"):
			return str(v, "metadata.name", &m.Name)
		case jsonscan.KeyIs(k, "generateName"):
			return str(v, "metadata.generateName", &m.GenerateName)
		case jsonscan.KeyIs(k, "namespace"):
			return str(v, "metadata.namespace", &m.Namespace)
		case jsonscan.KeyIs(k, "uid"):
			return str(v, "metadata.uid", &m.UID)
		case jsonscan.KeyIs(k, "labels"):
			return strMap(v, "metadata.labels", &m.Labels)
		case jsonscan.KeyIs(k, "annotations"):
			return strMap(v, "metadata.annotations", &m.Annotations)
		case jsonscan.KeyIs(k, "deletionTimestamp"):
			if jsonscan.IsNull(v) {
				m.DeletionTimestamp = nil
				return nil
			}
			raw := json.RawMessage(append([]byte(nil), v...))
			m.DeletionTimestamp = &raw
		}
		return nil
	})
}

func decodeSpec(b []byte, s *PodSpec) error {
	return object(b, "spec", func(k, v []byte) error {
		switch {
		case jsonscan.KeyIs(k, "schedulerName"):
			return str(v, "spec.schedulerName", &s.SchedulerName)
		case jsonscan.KeyIs(k, "containers"):
			return decodeContainers(v, "spec.containers", &s.Containers)
		case jsonscan.KeyIs(k, "initContainers"):
			return decodeContainers(v, "spec.initContainers", &s.InitContainers)
		}
		return nil
	})
}

func decodeContainers(b []byte, path string, dst *[]Container) error {
	if jsonscan.IsNull(b) {
		*dst = nil
		return nil
	}
	if jsonscan.Kind(b) != '[' {
		return typeError(path, "an array")
	}
	n := 0
	for it := jsonscan.Array(b); it.Next(); {
		n++
	}
	out := make([]Container, n) // empty, not nil, for [] (as encoding/json)
	it := jsonscan.Array(b)
	for i := 0; it.Next() && i < n; i++ {
		if err := decodeContainer(it.Value(), path, &out[i]); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	*dst = out
	return nil
}

// decodeContainer reads one element of the containers array at path. Paths
// in errors are built only on error, keeping the walk free of allocations.
func decodeContainer(b []byte, path string, c *Container) error {
	in := func(err error, field string) error {
		if err != nil {
			return fmt.Errorf("%s[]%s: %w", path, field, err)
		}
		return nil
	}
	return in(object(b, "", func(k, v []byte) error {
		switch {
		case jsonscan.KeyIs(k, "name"):
			return in(str(v, "", &c.Name), ".name")
		case jsonscan.KeyIs(k, "restartPolicy"):
			if jsonscan.IsNull(v) {
				c.RestartPolicy = nil
				return nil
			}
			var rp string
			if err := str(v, "", &rp); err != nil {
				return in(err, ".restartPolicy")
			}
			pol := corev1.ContainerRestartPolicy(rp)
			c.RestartPolicy = &pol
		case jsonscan.KeyIs(k, "resources"):
			return in(object(v, "", func(k, v []byte) error {
				switch {
				case jsonscan.KeyIs(k, "limits"):
					return in(gpuList(v, "", &c.Resources.Limits), ".resources.limits")
				case jsonscan.KeyIs(k, "requests"):
					return in(gpuList(v, "", &c.Resources.Requests), ".resources.requests")
				}
				return nil
			}), ".resources")
		}
		return nil
	}), "")
}

// gpuList reads a resource list's GPU entry into dst (nil when it has none).
// Like encoding/json decoding a corev1.ResourceList, the last of duplicate
// keys wins and a malformed GPU quantity is an error; the other entries are
// not parsed.
func gpuList(b []byte, path string, dst *corev1.ResourceList) error {
	if jsonscan.IsNull(b) {
		*dst = nil
		return nil
	}
	if jsonscan.Kind(b) != '{' {
		return typeError(path, "an object")
	}
	var q resource.Quantity
	found := false
	var mig corev1.ResourceList
	it := jsonscan.Object(b)
	for it.Next() {
		key := it.Key()
		if !jsonscan.KeyIs(key, string(GPUResource)) {
			// MIG slices (nvidia.com/mig-<profile>) are GPUs too.
			if len(key) > len(MIGResourcePrefix)+1 && string(key[1:1+len(MIGResourcePrefix)]) == MIGResourcePrefix {
				name, err := jsonscan.String(key)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				var mq resource.Quantity
				if err := mq.UnmarshalJSON(it.Value()); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				if mig == nil {
					mig = corev1.ResourceList{}
				}
				mig[corev1.ResourceName(name)] = mq
			}
			continue
		}
		if err := q.UnmarshalJSON(it.Value()); err != nil {
			if path == "" {
				return err
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		found = true
	}
	if err := it.Err(); err != nil {
		return err
	}
	*dst = mig
	if found {
		if *dst == nil {
			*dst = corev1.ResourceList{}
		}
		(*dst)[GPUResource] = q
	}
	return nil
}

// object calls fn for each member of the object b; null is an empty object.
func object(b []byte, path string, fn func(k, v []byte) error) error {
	if jsonscan.IsNull(b) {
		return nil
	}
	if jsonscan.Kind(b) != '{' {
		return typeError(path, "an object")
	}
	it := jsonscan.Object(b)
	for it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Err()
}

// str reads a string into dst; null leaves dst as it is (as encoding/json).
func str(b []byte, path string, dst *string) error {
	if jsonscan.IsNull(b) {
		return nil
	}
	if jsonscan.Kind(b) != '"' {
		return typeError(path, "a string")
	}
	s, err := jsonscan.String(b)
	if err != nil {
		if path == "" {
			return err
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	*dst = s
	return nil
}

// strMap reads an object of strings into *dst, adding to a map already there
// (as encoding/json); null sets it to nil.
func strMap(b []byte, path string, dst *map[string]string) error {
	if jsonscan.IsNull(b) {
		*dst = nil
		return nil
	}
	if jsonscan.Kind(b) != '{' {
		return typeError(path, "an object")
	}
	m, err := jsonscan.StringMap(b, *dst)
	if err != nil {
		return typeError(path, "an object of strings")
	}
	*dst = m
	return nil
}
