package workload

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hopsworks/runai-webhook/pkg/internal/jsontest"
)

// podFields are the struct field names encoding/json matches in a pod.
var podFields = []string{"metadata", "name", "generateName", "namespace", "uid", "labels", "annotations", "deletionTimestamp",
	"spec", "schedulerName", "containers", "initContainers", "restartPolicy", "resources", "limits", "requests", "status", "phase"}

// referencePod is the specification of Decode: encoding/json into Pod,
// except that of a resource list only the GPU entry is parsed.
type referencePod struct {
	Metadata PodMeta `json:"metadata"`
	Spec     struct {
		SchedulerName  string               `json:"schedulerName,omitempty"`
		Containers     []referenceContainer `json:"containers"`
		InitContainers []referenceContainer `json:"initContainers,omitempty"`
	} `json:"spec"`
	Status struct {
		Phase corev1.PodPhase `json:"phase,omitempty"`
	} `json:"status"`
}

type referenceContainer struct {
	Name          string                         `json:"name"`
	RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
	Resources     struct {
		Limits   map[string]json.RawMessage `json:"limits"`
		Requests map[string]json.RawMessage `json:"requests"`
	} `json:"resources"`
}

func referenceDecode(raw []byte) (*Pod, error) {
	var in referencePod
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	gpu := func(m map[string]json.RawMessage) (corev1.ResourceList, error) {
		v, ok := m[string(GPUResource)]
		if !ok {
			return nil, nil
		}
		var q resource.Quantity
		if err := q.UnmarshalJSON(v); err != nil {
			return nil, err
		}
		return corev1.ResourceList{GPUResource: q}, nil
	}
	conv := func(cs []referenceContainer) ([]Container, error) {
		if cs == nil {
			return nil, nil
		}
		out := make([]Container, len(cs))
		for i, c := range cs {
			out[i] = Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
			var err error
			if out[i].Resources.Limits, err = gpu(c.Resources.Limits); err != nil {
				return nil, err
			}
			if out[i].Resources.Requests, err = gpu(c.Resources.Requests); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	p := &Pod{Metadata: in.Metadata, Status: in.Status}
	p.Spec.SchedulerName = in.Spec.SchedulerName
	var err error
	if p.Spec.Containers, err = conv(in.Spec.Containers); err != nil {
		return nil, err
	}
	if p.Spec.InitContainers, err = conv(in.Spec.InitContainers); err != nil {
		return nil, err
	}
	return p, nil
}

var decodeSamples = []string{
	`{"metadata":{"name":"p","generateName":"p-","namespace":"ns","uid":"u","labels":{"a":"b"},"annotations":{"gpu-fraction":"0.5"}},"spec":{"schedulerName":"s","containers":[{"name":"c","restartPolicy":"Always","resources":{"limits":{"cpu":"1","nvidia.com/gpu":"2"},"requests":{"nvidia.com/gpu":2}}}],"initContainers":[{"name":"i"}]},"status":{"phase":"Running"}}`,
	`null`, `{}`, `{"metadata":null,"spec":null,"status":null}`,
	`{"spec":{"containers":[]}}`, `{"spec":{"containers":null}}`, `{"spec":{"containers":[null,{}]}}`,
	`{"metadata":{"labels":null,"annotations":{}}}`, `{"metadata":{"labels":{"a":null}}}`,
	`{"metadata":{"deletionTimestamp":"2024-01-01T00:00:00Z"}}`, `{"metadata":{"deletionTimestamp":null}}`, `{"metadata":{"deletionTimestamp":7}}`,
	`{"metadata":{"name":"caf\u00e9","labels":{"k\/1":"v\"2"}}}`, "{\"metadata\":{\"name\":\"\xff\"}}",
	`{"meta\u0064ata":{"name":"escaped key"}}`,
	`{"spec":{"containers":[{"resources":{"limits":{"nvidia.com\/gpu":"1"}}}]}}`,
	`{"spec":{"containers":[{"resources":{"limits":{"cpu":"not a quantity","nvidia.com/gpu":"1"}}}]}}`,
	`{"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":null}}}]}}`,
	`{"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"x"}}}]}}`,
	`{"spec":{"containers":[{"resources":{"limits":{}}}]}}`,
	`{"spec":{"containers":[{"restartPolicy":null},{"restartPolicy":""}]}}`,
	`  {"status":{"phase":"Failed"},"spec":{"schedulerName":null}}  `,
	// type errors
	`[]`, `"pod"`, `7`, `true`, `{"metadata":[]}`, `{"metadata":{"name":7}}`, `{"metadata":{"labels":{"a":1}}}`,
	`{"metadata":{"labels":[]}}`, `{"spec":{"containers":{}}}`, `{"spec":{"containers":[7]}}`,
	`{"spec":{"containers":[{"restartPolicy":1}]}}`, `{"spec":{"containers":[{"resources":[]}]}}`,
	`{"spec":{"containers":[{"resources":{"limits":"1"}}]}}`, `{"status":{"phase":false}}`,
	// not JSON
	``, `{`, `{"metadata":{"name":"p"}`, `{"a":1,}`,
}

func TestDecodeMatchesReference(t *testing.T) {
	for _, s := range decodeSamples {
		got, err := Decode([]byte(s))
		want, werr := referenceDecode([]byte(s))
		if werr != nil {
			assert.Error(t, err, "%s", s)
			if err != nil {
				assert.True(t, strings.HasPrefix(err.Error(), "decoding pod: "), err.Error())
			}
			continue
		}
		require.NoError(t, err, "%s", s)
		assert.Equal(t, want, got, "%s", s)
	}
}

func TestDecodeDifferences(t *testing.T) {
	// Case variants of keys: encoding/json takes them, the API server (and
	// Decode) do not. The API server never writes them.
	p, err := Decode([]byte(`{"Metadata":{"Name":"x"},"metadata":{"NAME":"y"}}`))
	require.NoError(t, err)
	assert.Empty(t, p.Metadata.Name)
	// Non-GPU quantities are not parsed.
	p, err = Decode([]byte(`{"spec":{"containers":[{"resources":{"limits":{"cpu":"lots"}}}]}}`))
	require.NoError(t, err)
	assert.Nil(t, p.Spec.Containers[0].Resources.Limits)
	// A malformed GPU quantity is an error, naming where it is.
	_, err = Decode([]byte(`{"spec":{"initContainers":[{"resources":{"requests":{"nvidia.com/gpu":"one"}}}]}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.initContainers[].resources.requests")
	// Syntax errors are encoding/json's.
	_, err = Decode([]byte(`{"metadata":}`))
	assert.EqualError(t, err, "decoding pod: invalid character '}' looking for beginning of value")
}

func TestDecodeFixture(t *testing.T) {
	b, err := os.ReadFile("../mutate/testdata/notebook-review.json")
	require.NoError(t, err)
	var rv struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal(b, &rv))
	got, err := Decode(rv.Request.Object)
	require.NoError(t, err)
	want, err := referenceDecode(rv.Request.Object)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	g, err := got.GPURequest()
	require.NoError(t, err)
	assert.Equal(t, GPUs{Whole: 1}, g)
	assert.Equal(t, "notebook", got.Type())
}

// FuzzDecode: on any input Decode never panics, and on the API server's
// kind of JSON it agrees with its specification (encoding/json, GPU entries
// only): the same pod, or an error from both.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := Decode(raw)
		if err == nil {
			_, _ = got.GPURequest()
		}
		if !jsontest.Canonical(raw, podFields...) {
			return
		}
		want, werr := referenceDecode(raw)
		if (err != nil) != (werr != nil) {
			t.Fatalf("Decode error %v, reference error %v", err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode = %+v, reference %+v", got, want)
		}
	})
}
