// Command demo tells the runai-webhook story on a local control plane (etcd,
// kube-apiserver and kube-controller-manager built from Go modules) with the
// bundled Run:ai simulator: every step is a real kubectl call through the
// webhook configurations users install. Run it with `make demo`.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	env  *framework.Env
	ctx  context.Context
	step int
}

func (d *demo) say(format string, a ...any) {
	d.step++
	fmt.Printf("\n=== %d. %s\n", d.step, fmt.Sprintf(format, a...))
}

// kubectl runs the built kubectl, echoing the command and its output.
func (d *demo) kubectl(stdin string, wantFail bool, args ...string) (string, string, error) {
	fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
	out, stderr, err := d.env.Kubectl(d.ctx, stdin, args...)
	for _, s := range []string{out, stderr} {
		if s = strings.TrimSpace(s); s != "" {
			fmt.Println(indent(s))
		}
	}
	switch {
	case wantFail && err == nil:
		return out, stderr, fmt.Errorf("kubectl %s was expected to be refused", strings.Join(args, " "))
	case !wantFail && err != nil:
		return out, stderr, fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return out, stderr, nil
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func run() error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Println("runai-webhook demo: a local Kubernetes control plane, the Run:ai simulator and the webhook, driven with kubectl.")
	env, err := framework.Start(ctx, framework.Options{
		Seed: runaitest.Seed{
			ClientID: framework.ClientID, ClientSecret: framework.ClientSecret,
			Departments: []runaitest.DepartmentSeed{{Name: "research", DeservedGPUs: 8}, {Name: "vision", DeservedGPUs: 8}},
		},
		Configure: func(c *config.Config) { c.ProjectGPUQuota = 1 },
		Log:       os.Stdout,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\n=== tearing down")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "teardown:", err)
		}
		fmt.Printf("demo finished in %s\n", time.Since(start).Round(100*time.Millisecond))
	}()
	d := &demo{env: env, ctx: ctx}

	d.say("A Hopsworks project namespace in department research is created; the controller binds it to a new Run:ai project (1 deserved GPU)")
	if _, _, err := d.kubectl(ns("team-a", "research"), false, "apply", "-f", "-"); err != nil {
		return err
	}
	if err := waitLabel(d, "team-a"); err != nil {
		return err
	}
	if _, _, err := d.kubectl("", false, "get", "ns", "team-a", "-L", "runai/queue,hopsworks.ai/runai-project-id,hopsworks.ai/department"); err != nil {
		return err
	}
	p, _ := env.Sim.ProjectByName("team-a")
	fmt.Printf("    Run:ai: project %s (id %s), phase %s, namespace %s\n", p.Name, p.ID, p.Status.Phase, p.BoundNamespace())

	d.say("A notebook with 1 GPU gets the project's queue label and the Run:ai scheduler")
	if _, _, err := d.kubectl(pod("team-a", "notebook-1", "notebook", 1), false, "apply", "-f", "-"); err != nil {
		return err
	}
	if _, _, err := d.kubectl("", false, "get", "pod", "notebook-1", "-n", "team-a", "-o", "jsonpath=queue={.metadata.labels.runai/queue} scheduler={.spec.schedulerName}{\"\\n\"}"); err != nil {
		return err
	}

	d.say("A second 1-GPU notebook does not fit in the project's quota: refused with the GPUs left")
	if _, _, err := d.kubectl(pod("team-a", "notebook-2", "notebook", 1), true, "apply", "-f", "-"); err != nil {
		return err
	}

	d.say("A job of the same size is admitted: jobs are preemptible and may use idle GPUs over quota")
	if _, _, err := d.kubectl(pod("team-a", "job-1", "job", 1), false, "apply", "-f", "-"); err != nil {
		return err
	}

	d.say("Escapes are refused: a pod naming another project's queue")
	if _, _, err := d.kubectl(strings.Replace(pod("team-a", "sneaky", "job", 0), "labels:\n", "labels:\n    runai/queue: team-b\n", 1), true, "apply", "-f", "-"); err != nil {
		return err
	}

	d.say("Dry run: the first pod of an unbound project namespace previews its binding, and nothing is created in Run:ai")
	if err := env.Sim.SetDown(true); err != nil { // keep team-b unbound for the preview
		return err
	}
	if _, _, err := d.kubectl(ns("team-b", "vision"), false, "apply", "-f", "-"); err != nil {
		return err
	}
	time.Sleep(time.Second)
	if err := env.Sim.SetDown(false); err != nil {
		return err
	}
	writes := env.Sim.CountWrites()
	if _, _, err := d.kubectl(pod("team-b", "notebook", "notebook", 0), false, "apply", "--dry-run=server", "-o", "jsonpath={.metadata.labels}{\"\\n\"}", "-f", "-"); err != nil {
		return err
	}
	fmt.Printf("    Run:ai writes during the dry run: %d\n", env.Sim.CountWrites()-writes)

	d.say("Department move: team-a leaves research for vision once its pods are gone; its Run:ai project is re-created there without quota")
	if _, _, err := d.kubectl("", false, "delete", "pod", "--all", "-n", "team-a", "--wait=true"); err != nil {
		return err
	}
	if _, _, err := d.kubectl("", false, "label", "ns", "team-a", "hopsworks.ai/department=vision", "--overwrite", "--dry-run=server"); err != nil {
		return err
	}
	if _, _, err := d.kubectl("", false, "label", "ns", "team-a", "hopsworks.ai/department=vision", "--overwrite"); err != nil {
		return err
	}
	p, _ = env.Sim.ProjectByName("team-a")
	dept := p.ParentID
	for _, x := range env.Sim.Departments() {
		if x.ID == p.ParentID {
			dept = x.Name
		}
	}
	fmt.Printf("    Run:ai: project %s (id %s) now in department %s with %v deserved GPUs\n", p.Name, p.ID, dept, p.Resources[0].DeservedGPU())

	d.say("GPU view: what a member of team-a sees of its Run:ai project (default node pool), through Kubernetes authentication and authorization")
	if err := gpuView(d, "team-a"); err != nil {
		return err
	}
	return nil
}

func waitLabel(d *demo, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, _, err := d.env.Kubectl(d.ctx, "", "get", "ns", name, "-o", "jsonpath={.metadata.labels.runai/queue}")
		if err == nil && strings.TrimSpace(out) != "" {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("namespace %s was not bound within 30s", name)
}

func ns(name, dept string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    hopsworks.ai/project: %s\n    hopsworks.ai/department: %s\n", name, name, dept)
}

func pod(namespace, name, typ string, gpus int) string {
	s := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n  labels:\n    hopsworks.ai/workload-type: %s\nspec:\n  containers:\n  - name: main\n    image: registry.invalid/hopsworks/%s:1\n", name, namespace, typ, typ)
	if gpus > 0 {
		s += fmt.Sprintf("    resources:\n      limits:\n        nvidia.com/gpu: %d\n", gpus)
	}
	return s
}
