package workload

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FuzzGPURequest builds a pod from fuzz strings (GPU quantities of two app
// containers and an init container or sidecar, and the gpu-fraction
// annotations) and checks GPURequest: no panic; a demand it returns is never
// negative, NaN or infinite, never both whole and fractional, and at least
// any single container's whole GPUs (so no amount can overflow into "no
// GPUs" and slip past the scheduler and quota rules).
func FuzzGPURequest(f *testing.F) {
	f.Add("1", "", "2", "", false, "", "", uint8(0))
	f.Add("", "", "", "", false, "0.5", "2", uint8(3))
	f.Add("500m", "", "", "", false, "", "", uint8(0))
	f.Add("9223372036854775807", "", "9223372036854775807", "", false, "", "", uint8(0))
	f.Add("5e18", "", "5e18", "", false, "", "", uint8(0))
	f.Add("1", "1", "", "4", true, "NaN", "", uint8(1))
	f.Add("", "1e3", "", "", false, "1e-400", "1024", uint8(3))
	f.Fuzz(func(t *testing.T, limA, reqA, limB, initQ string, sidecar bool, frac, devices string, ann uint8) {
		list := func(s string) corev1.ResourceList {
			if s == "" {
				return nil
			}
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return nil
			}
			return corev1.ResourceList{GPUResource: q}
		}
		p := &Pod{}
		p.Spec.Containers = []Container{
			{Name: "a", Resources: corev1.ResourceRequirements{Limits: list(limA), Requests: list(reqA)}},
			{Name: "b", Resources: corev1.ResourceRequirements{Limits: list(limB)}},
		}
		if initQ != "" {
			c := Container{Name: "i", Resources: corev1.ResourceRequirements{Limits: list(initQ)}}
			if sidecar {
				always := corev1.ContainerRestartPolicyAlways
				c.RestartPolicy = &always
			}
			p.Spec.InitContainers = []Container{c}
		}
		if ann != 0 {
			p.Metadata.Annotations = map[string]string{}
			if ann&1 != 0 {
				p.Metadata.Annotations[GPUFractionAnnotation] = frac
			}
			if ann&2 != 0 {
				p.Metadata.Annotations[GPUFractionDevices] = devices
			}
		}
		g, err := p.GPURequest()
		if err != nil {
			return
		}
		tot := g.Total()
		if g.Whole < 0 || g.Fraction < 0 || math.IsNaN(tot) || math.IsInf(tot, 0) {
			t.Fatalf("impossible demand %+v", g)
		}
		if g.Whole > 0 && g.Fraction > 0 {
			t.Fatalf("both whole and fractional: %+v", g)
		}
		if g.Fraction > 1024 {
			t.Fatalf("fraction over the device limit: %+v", g)
		}
		if g.Any() != (tot > 0) {
			t.Fatalf("Any %v disagrees with Total %v", g.Any(), tot)
		}
		for _, s := range []string{limA, reqA, limB, initQ} {
			if rl := list(s); rl != nil {
				q := rl[GPUResource]
				if v, ok := q.AsInt64(); ok && v > g.Whole {
					t.Fatalf("container asks for %d, pod demand is %d", v, g.Whole)
				}
			}
		}
	})
}
