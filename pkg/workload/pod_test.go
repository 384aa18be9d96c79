package workload

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func gpuContainer(name string, limit, request string) Container {
	c := Container{Name: name}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{GPUResource: resource.MustParse(limit)}
	}
	if request != "" {
		c.Resources.Requests = corev1.ResourceList{GPUResource: resource.MustParse(request)}
	}
	return c
}

func sidecar(c Container) Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestGPURequest(t *testing.T) {
	tests := []struct {
		name        string
		containers  []Container
		init        []Container
		annotations map[string]string
		want        GPUs
		wantErr     string
	}{
		{name: "no gpus", containers: []Container{{Name: "a"}}},
		{name: "one container limit", containers: []Container{gpuContainer("a", "1", "")}, want: GPUs{Whole: 1}},
		{name: "request only counts", containers: []Container{gpuContainer("a", "", "2")}, want: GPUs{Whole: 2}},
		{name: "multi container sums", containers: []Container{gpuContainer("a", "1", "1"), gpuContainer("b", "2", ""), {Name: "c"}}, want: GPUs{Whole: 3}},
		{name: "init container larger than app", containers: []Container{gpuContainer("a", "1", "")}, init: []Container{gpuContainer("i", "4", "")}, want: GPUs{Whole: 4}},
		{name: "init containers run one at a time", containers: []Container{gpuContainer("a", "1", "")}, init: []Container{gpuContainer("i1", "2", ""), gpuContainer("i2", "3", "")}, want: GPUs{Whole: 3}},
		{name: "sidecar adds to app", containers: []Container{gpuContainer("a", "1", "")}, init: []Container{sidecar(gpuContainer("s", "1", ""))}, want: GPUs{Whole: 2}},
		{name: "sidecar adds to later init step", containers: []Container{{Name: "a"}}, init: []Container{sidecar(gpuContainer("s", "1", "")), gpuContainer("i", "2", "")}, want: GPUs{Whole: 3}},
		{name: "fraction", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionAnnotation: "0.5"}, want: GPUs{Fraction: 0.5}},
		{name: "fraction times devices", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionAnnotation: "0.5", GPUFractionDevices: "2"}, want: GPUs{Fraction: 1}},
		{name: "fraction over one", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionAnnotation: "1.5"}, wantErr: "greater than 0 and at most 1"},
		{name: "fraction garbage", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionAnnotation: "half"}, wantErr: `gpu-fraction="half"`},
		{name: "fraction NaN", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionAnnotation: "NaN"}, wantErr: "gpu-fraction"},
		{name: "zero devices", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionAnnotation: "0.5", GPUFractionDevices: "0"}, wantErr: "from 1 to 1024"},
		{name: "devices without fraction", containers: []Container{{Name: "a"}}, annotations: map[string]string{GPUFractionDevices: "2"}, wantErr: "without gpu-fraction"},
		{name: "fraction and whole gpus", containers: []Container{gpuContainer("a", "1", "")}, annotations: map[string]string{GPUFractionAnnotation: "0.5"}, wantErr: "one or the other"},
		{name: "fractional resource quantity", containers: []Container{gpuContainer("a", "500m", "")}, wantErr: "whole number of GPUs"},
		{name: "MIG slices are GPUs (not counted against quota)", containers: []Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.5gb": resource.MustParse("2")}}}}, want: GPUs{MIG: 2}},
		{name: "MIG in an init container", containers: []Container{{Name: "a"}}, init: []Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/mig-3g.20gb": resource.MustParse("1")}}}}, want: GPUs{MIG: 1}},
		{name: "huge counts saturate instead of wrapping to no GPUs", containers: []Container{gpuContainer("a", "5e18", ""), gpuContainer("b", "5e18", "")}, want: GPUs{Whole: math.MaxInt64}},
		{name: "huge sidecar plus init step saturates", containers: []Container{{Name: "a"}}, init: []Container{sidecar(gpuContainer("s", "5e18", "")), gpuContainer("i", "5e18", "")}, want: GPUs{Whole: math.MaxInt64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Pod{Metadata: PodMeta{Annotations: tt.annotations}, Spec: PodSpec{Containers: tt.containers, InitContainers: tt.init}}
			got, err := p.GPURequest()
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want.Whole > 0 || tt.want.Fraction > 0 || tt.want.MIG > 0, got.Any())
		})
	}
}

func TestNonPreemptible(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{TypeLabel: "job"}, false},
		{map[string]string{TypeLabel: "ray"}, false},
		{map[string]string{TypeLabel: "notebook"}, true},
		{map[string]string{TypeLabel: " Notebook "}, true},
		{map[string]string{TypeLabel: "terminal"}, true},
		{map[string]string{TypeLabel: "app"}, true},
		{map[string]string{TypeLabel: "deployment"}, true},
		{map[string]string{TypeLabel: "notebook", PreemptibilityLabel: "preemptible"}, true},
		{map[string]string{TypeLabel: "job", PreemptibilityLabel: "non-preemptible"}, true},
		{map[string]string{PreemptibilityLabel: "non-preemptible"}, true},
		{map[string]string{PreemptibilityLabel: "semi-preemptible"}, false},
		{map[string]string{TypeLabel: "something-else"}, false},
	}
	for _, tt := range tests {
		p := &Pod{Metadata: PodMeta{Labels: tt.labels}}
		assert.Equal(t, tt.want, p.NonPreemptible(), "%v", tt.labels)
	}
}

func TestDecodeAndFromCoreAgree(t *testing.T) {
	raw := []byte(`{"metadata":{"generateName":"nb-","namespace":"team-a","labels":{"hopsworks.ai/workload-type":"notebook"}},
	  "spec":{"schedulerName":"default-scheduler","containers":[{"name":"a","image":"x","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}`)
	p, err := Decode(raw)
	require.NoError(t, err)
	assert.Equal(t, "nb-*", p.DisplayName())
	g, err := p.GPURequest()
	require.NoError(t, err)
	assert.Equal(t, int64(2), g.Whole)

	core := &corev1.Pod{}
	core.GenerateName, core.Namespace, core.Labels = "nb-", "team-a", map[string]string{TypeLabel: "notebook"}
	core.Spec.Containers = []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("2")}}}}
	g2, err := FromCore(core).GPURequest()
	require.NoError(t, err)
	assert.Equal(t, g, g2)

	_, err = Decode([]byte(`{"metadata":`))
	assert.ErrorContains(t, err, "decoding pod")
}
