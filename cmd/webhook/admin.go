package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/ops"
)

// adminClient builds a Kubernetes client from --kubeconfig (or the usual
// loading rules) that collects the API server's warnings.
func adminClient(kubeconfig string) (client.Client, *ops.Warnings, error) {
	if kubeconfig != "" {
		os.Setenv("KUBECONFIG", kubeconfig)
	}
	rc, err := ctrl.GetConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	w := &ops.Warnings{}
	c, err := ops.NewClient(rc, client.Options{Scheme: app.Scheme()}, w)
	return c, w, err
}

func parse(fs *flag.FlagSet, args []string) (bool, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// runDepartment: `runai-webhook department delete NAME [--dry-run]`.
func runDepartment(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 || args[0] != "delete" {
		return errors.New("usage: runai-webhook department delete NAME [--dry-run] [--kubeconfig F]")
	}
	fs := flag.NewFlagSet("department delete", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "preview each move (kubectl --dry-run=server) without changing anything")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file")
	cfg := config.Default()
	fs.StringVar(&cfg.DepartmentLabel, "department_label", cfg.DepartmentLabel, "namespace label carrying the Hopsworks department")
	fs.StringVar(&cfg.ProjectLabel, "project_label", cfg.ProjectLabel, "namespace label marking a Hopsworks project")
	rest := args[1:]
	var name string
	if len(rest) > 0 && rest[0] != "" && rest[0][0] != '-' {
		name, rest = rest[0], rest[1:]
	}
	if ok, err := parse(fs, rest); !ok {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if !config.ValidDepartmentName(name) {
		return fmt.Errorf("department name %q breaks the naming rule (at most 63 lowercase letters, digits and '-')", name)
	}
	c, w, err := adminClient(*kubeconfig)
	if err != nil {
		return err
	}
	_, err = ops.DeleteDepartment(ctx, c, w, nsview.KeysFrom(cfg), name, *dryRun, stdout)
	return err
}

// runLeave: `runai-webhook leave [--dry-run] [--yes]`.
func runLeave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("leave", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "print what would be deleted and unlabelled, change nothing")
	yes := fs.Bool("yes", false, "confirm: delete the Run:ai projects created for Hopsworks namespaces (their workloads stop)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file")
	cfg := config.Default()
	config.Register(fs, &cfg)
	if ok, err := parse(fs, args); !ok {
		return err
	}
	if err := config.ApplyEnv(fs, &cfg, os.LookupEnv); err != nil {
		return err
	}
	if !*dryRun && !*yes {
		return errors.New("leave deletes the Run:ai projects Hopsworks created (their workloads stop) and unbinds the namespaces; preview with --dry-run, confirm with --yes")
	}
	cfg.RunAIEnable = true // the CLI talks to Run:ai whatever the webhook's setting
	if err := cfg.Validate(os.ReadFile); err != nil {
		return fmt.Errorf("Run:ai settings for leave:\n%w", err)
	}
	api, err := app.NewRunAIClient(cfg, newLogger(stderr, 0))
	if err != nil {
		return err
	}
	c, _, err := adminClient(*kubeconfig)
	if err != nil {
		return err
	}
	_, err = ops.Leave(ctx, c, api, nsview.KeysFrom(cfg), *dryRun, stdout)
	return err
}

// runPreflight: `runai-webhook preflight kueue` exits non-zero while any
// namespace is still bound to Run:ai.
func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 || args[0] != "kueue" {
		return errors.New("usage: runai-webhook preflight kueue [--kubeconfig F]")
	}
	fs := flag.NewFlagSet("preflight kueue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file")
	queue := fs.String("queue_label_key", config.DefaultQueueLabelKey, "label naming the Run:ai queue")
	if ok, err := parse(fs, args[1:]); !ok {
		return err
	}
	c, _, err := adminClient(*kubeconfig)
	if err != nil {
		return err
	}
	bound, err := ops.StillBound(ctx, c, *queue)
	if err != nil {
		return err
	}
	if len(bound) == 0 {
		fmt.Fprintln(stdout, "ok: no namespace is bound to Run:ai; Kueue can be enabled")
		return nil
	}
	fmt.Fprintf(stdout, "%d namespace(s) still bound to Run:ai; Run:ai's admission webhooks and Kueue would both act on their pods:\n", len(bound))
	for _, b := range bound {
		fmt.Fprintln(stdout, "  "+b)
	}
	return fmt.Errorf("not ready for Kueue: unbind these namespaces first (runai-webhook leave)")
}
