// Command runai-webhook is the Hopsworks–Run:ai admission webhook and its
// tools. Sub-commands:
//
//	serve       admission webhooks, health and metrics (every replica)
//	reconcile   namespace controller and background pass (leader-elected sidecar)
//	run         both in one process (local runs, the demo)
//	certs       write a CA and serving certificate for local runs
//	gpu         print a namespace's Run:ai GPU view
//	admin       print the Run:ai admin view (departments and projects)
//	version     print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hopsworks/runai-webhook/certs"
	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/config"
)

// version is stamped at build time with -ldflags -X main.version=...
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "runai-webhook:", err)
		os.Exit(1)
	}
}

const usage = `runai-webhook: Hopsworks namespaces on NVIDIA Run:ai

Usage: runai-webhook <command> [flags]

Commands:
  serve       serve the admission webhooks, health and metrics
  reconcile   run the namespace controller and background pass (leader-elected)
  run         serve and reconcile in one process
  certs       write a CA and serving certificate for local runs
  department delete NAME [--dry-run]
              move a Hopsworks department's namespaces to the default department
  leave [--dry-run] [--yes]
              delete the Run:ai projects Hopsworks created and unbind the namespaces
  preflight kueue
              list namespaces still bound to Run:ai; fails while any remain
  gpu -n NAMESPACE [-o table|json]
              print a namespace's Run:ai GPU view (through the API server, or --server)
  admin [-o table|json]
              print the Run:ai admin view: departments and projects and their GPUs
  version     print the version

Run 'runai-webhook <command> --help' for the flags of a command.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runManager(ctx, "serve", rest, true, false, stderr)
	case "reconcile":
		return runManager(ctx, "reconcile", rest, false, true, stderr)
	case "run":
		return runManager(ctx, "run", rest, true, true, stderr)
	case "certs":
		return runCerts(rest, stdout, stderr)
	case "gpu":
		return runGPU(ctx, rest, stdout, stderr)
	case "admin":
		return runAdmin(ctx, rest, stdout, stderr)
	case "department":
		return runDepartment(ctx, rest, stdout, stderr)
	case "leave":
		return runLeave(ctx, rest, stdout, stderr)
	case "preflight":
		return runPreflight(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func runManager(ctx context.Context, name string, args []string, serve, reconcile bool, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config.Default()
	config.Register(fs, &cfg)
	o := app.Options{Serve: serve, Reconcile: reconcile}
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "address the admission server listens on (empty: all)")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port of the admission server")
	fs.StringVar(&o.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "folder with tls.crt and tls.key (reloaded when they change)")
	fs.BoolVar(&o.CertRotation, "cert-rotation", false, "manage a CA and serving certificate in --cert-secret and inject the CA into the webhook configurations (without cert-manager); the Secret must be mounted at --cert-dir")
	fs.StringVar(&o.CertSecretName, "cert-secret", "", "Secret (in --service-namespace) holding the CA and serving certificate when --cert-rotation is on")
	fs.StringVar(&o.WebhookConfigName, "webhook-config-name", "", "name of the Mutating and Validating webhook configurations to inject the CA into (--cert-rotation)")
	serviceName := fs.String("service-name", "", "Service in front of the webhook; the certificate is valid for <name>.<namespace>.svc[.cluster.local] (--cert-rotation)")
	fs.StringVar(&o.CertSecretNamespace, "service-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Service and the Secret (default: $POD_NAMESPACE)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":8080", "address of /metrics (0 disables)")
	fs.StringVar(&o.HealthAddr, "health-addr", ":8081", "address of /healthz and /readyz (0 disables)")
	fs.BoolVar(&o.LeaderElection, "leader-elect", reconcile && !serve, "elect one active reconciler among replicas")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election lease (default: the pod's)")
	trusted := fs.String("trusted-label-writers", "system:serviceaccount:runai:", "comma-separated user-name prefixes that may also write binding labels (Run:ai's controllers)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster or $KUBECONFIG)")
	verbosity := fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := config.ApplyEnv(fs, &cfg, os.LookupEnv); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	if err := cfg.Validate(os.ReadFile); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	log := newLogger(stderr, *verbosity)
	ctrl.SetLogger(log)
	if *kubeconfig != "" {
		os.Setenv("KUBECONFIG", *kubeconfig)
	}
	rc, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	if o.CertRotation && serve {
		if o.CertSecretName == "" || o.WebhookConfigName == "" || *serviceName == "" || o.CertSecretNamespace == "" {
			return errors.New("--cert-rotation needs --cert-secret, --webhook-config-name, --service-name and --service-namespace (or $POD_NAMESPACE)")
		}
		svc := *serviceName + "." + o.CertSecretNamespace + ".svc"
		o.CertDNSNames = []string{svc, svc + ".cluster.local"}
	}
	o.Config, o.RestConfig, o.Log = cfg, rc, log
	for _, p := range strings.Split(*trusted, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.TrustedWriterPrefixes = append(o.TrustedWriterPrefixes, p)
		}
	}
	log.Info("starting", "command", name, "version", version, "runAIEnable", cfg.RunAIEnable, "runAIURL", cfg.RunAIURL,
		"defaultDepartment", cfg.DefaultDepartment, "projectGPUQuota", cfg.ProjectGPUQuota, "reconcileInterval", cfg.ReconcileInterval.String(),
		"certRotation", o.CertRotation && serve)
	return app.Run(ctx, o)
}

// newLogger is a JSON logr logger; the secret never reaches it (config holds
// only the secret's file name).
func newLogger(w io.Writer, v int) logr.Logger {
	return funcr.NewJSON(func(obj string) { fmt.Fprintln(w, obj) }, funcr.Options{Verbosity: v, LogTimestamp: true, LogCaller: funcr.None})
}

func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "certs-out", "folder to write ca.crt, tls.crt and tls.key into")
	hosts := fs.String("hosts", "127.0.0.1,localhost", "comma-separated DNS names and IPs of the serving certificate")
	validity := fs.Duration("validity", 365*24*time.Hour, "validity of the CA and the certificate")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	pair, err := certs.Generate(strings.Split(*hosts, ","), *validity)
	if err != nil {
		return err
	}
	if err := pair.Write(*dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote ca.crt, tls.crt and tls.key to %s\n", *dir)
	return nil
}
