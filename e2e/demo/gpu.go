package main

import (
	"fmt"

	"github.com/hopsworks/runai-webhook/pkg/quota"
)

// gpuView prints the project's numbers as Run:ai reports them.
func gpuView(d *demo, namespace string) error {
	p, ok := d.env.Sim.ProjectByName(namespace)
	if !ok {
		return fmt.Errorf("no Run:ai project for %s", namespace)
	}
	q := quota.FromProject(p, d.env.Sim.DefaultNodePool())
	fmt.Printf("    project=%s deserved=%s allocated_non_preemptible=%s available_non_preemptible=%s\n",
		p.Name, quota.Format(q.Deserved), quota.Format(q.AllocatedNonPreemptible), quota.Format(max(0, q.Deserved-q.AllocatedNonPreemptible)))
	return nil
}
