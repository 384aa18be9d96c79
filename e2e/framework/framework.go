// Package framework starts the end-to-end test bed: a real etcd and
// kube-apiserver (envtest, binaries built from Go modules into bin/k8s), a
// real kube-controller-manager so Deployments, ReplicaSets and Jobs create
// pods as a cluster does, the Run:ai simulator, and the webhook itself, wired
// to the API server through the production webhook configurations rendered
// into manifests/install.yaml (only clientConfig is rewritten). The same
// package drives the suite on kind (USE_EXISTING_CLUSTER=true) and the demo.
//
// On an existing cluster (USE_EXISTING_CLUSTER=true, hack/e2e-kind.sh) the
// harness starts nothing: the API server, controllers, cert-manager and the
// webhook (the image, installed with the chart) are the cluster's, the webhook
// configurations are the chart's with cert-manager's injected CA, and Start
// only waits for the in-cluster webhook to answer through the API server.
// There is no in-process Run:ai simulator (Sim is nil; the script runs
// runai-sim as a sidecar of the webhook pod) and no in-process controller
// (Controller is nil); users other than the admin are impersonated. What this
// path covers that the local bed cannot: the container image (static,
// distroless, non-root, read-only root file system), the chart's Deployment,
// Service, RBAC, NetworkPolicy and probes on a real kubelet, cert-manager's
// issuance and CA injection, and admission through Service routing. See
// kindTests in e2e/main_test.go for the tests that run there.
package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hopsworks/runai-webhook/certs"
	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// Names the rendered install uses (helm template runai-webhook --namespace runai-webhook).
const (
	ReleaseNamespace = "runai-webhook"
	ReleaseName      = "runai-webhook"
	WebhookUser      = "system:serviceaccount:" + ReleaseNamespace + ":" + ReleaseName
	ClientID         = "hopsworks"
	ClientSecret     = "e2e-client-secret-never-logged"
)

// Options configure an environment.
type Options struct {
	// Root is the repository root (found from the working directory when empty).
	Root string
	// Seed is the Run:ai simulator's initial state.
	Seed runaitest.Seed
	// Configure adjusts the webhook's configuration before it starts.
	Configure func(*config.Config)
	// Log receives the harness's progress lines (nil: discarded).
	Log io.Writer
	// WebhookLog receives the webhook's structured logs (nil: discarded).
	WebhookLog io.Writer
	// NoControllerManager skips kube-controller-manager.
	NoControllerManager bool
	// CertRotation runs the webhook as the chart does with
	// certManager.enabled=false: the harness renders the chart that way
	// (RBAC, the empty Secret), writes no certificate, installs the webhook
	// configurations with a URL but no caBundle, and plays kubelet by
	// projecting the Secret into the cert dir; the webhook's rotator fills
	// the Secret and injects its CA. The webhook runs `serve` only, as in
	// its container (no reconcile controller: Controller stays nil). The
	// URL host is localhost, because the rotator's certificates carry DNS
	// names only.
	CertRotation bool
}

// Env is a running test bed.
type Env struct {
	Root            string
	Test            *envtest.Environment
	Admin           *rest.Config
	AdminKubeconfig string
	Client          client.Client
	Sim             *runaitest.Server
	Config          config.Config
	WebhookURL      string
	// Policies counts the admission policies and bindings loaded from
	// manifests/install.yaml (0 with the integration off).
	Policies int
	CertDir  string
	Dir      string
	// AuditLog is the API server's audit log of the webhook user's requests.
	AuditLog string
	// Controller is the webhook's reconcile controller; Pass runs a pass now.
	Controller *bind.Controller
	// HealthURL serves /healthz and /readyz (CertRotation only).
	HealthURL string
	// NotReadyChecks are the readiness checks seen failing before the
	// webhook became ready, and ReadyAfter how long that took from its start
	// (CertRotation only).
	NotReadyChecks []string
	ReadyAfter     time.Duration
	// Existing: running against an existing cluster (USE_EXISTING_CLUSTER=true).
	Existing bool
	// WebhookStarts counts the in-process webhook's starts (a restart would
	// make it 2).
	WebhookStarts int

	log       io.Writer
	kcm       *exec.Cmd
	kcmDone   chan error
	cancelApp context.CancelFunc
	appDone   chan error
	ctlCh     chan *bind.Controller
	mu        sync.Mutex
	stopped   bool

	// objs are the manifests installed (rendered chart or install.yaml).
	objs           []client.Object
	certRotation   bool
	stopProjector  context.CancelFunc
	projectorDone  chan struct{}
	webhookStarted time.Time
}

func (e *Env) logf(format string, a ...any) {
	if e.log != nil {
		fmt.Fprintf(e.log, "e2e: "+format+"\n", a...)
	}
}

// FindRoot walks up from the working directory to the folder holding go.mod.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "manifests")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod beside manifests/) not found above the working directory")
		}
		dir = parent
	}
}

// Assets returns bin/k8s, checking that every binary is there.
func Assets(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(root, "bin", "k8s")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s missing in %s: run `make testbin` (builds the control plane from Go modules; about 14 minutes the first time)", b, dir)
		}
	}
	return dir, nil
}

// Start brings the whole test bed up. On error everything started is stopped.
func Start(ctx context.Context, o Options) (env *Env, err error) {
	e := &Env{log: o.Log, Root: o.Root}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	if e.Root == "" {
		if e.Root, err = FindRoot(); err != nil {
			return nil, err
		}
	}
	assets, err := Assets(e.Root)
	if err != nil {
		return nil, err
	}
	if e.Dir, err = os.MkdirTemp("", "runai-webhook-e2e-"); err != nil {
		return nil, err
	}
	if UseExistingCluster() {
		if o.CertRotation {
			return nil, errors.New("CertRotation starts its own control plane; it does not run against an existing cluster")
		}
		if err = e.startExisting(ctx, o); err != nil {
			return nil, err
		}
		return e, nil
	}
	start := time.Now()
	local := false
	e.Test = &envtest.Environment{BinaryAssetsDirectory: assets, UseExistingCluster: &local}
	// The audit log records every request of the webhook's user, so the RBAC
	// test can compare the chart's rules with what the suite used.
	policy := filepath.Join(e.Dir, "audit-policy.yaml")
	e.AuditLog = filepath.Join(e.Dir, "audit.log")
	if err = os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	e.Test.ControlPlane.GetAPIServer().Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none").
		Set("audit-policy-file", policy).
		Set("audit-log-path", e.AuditLog).
		Set("audit-log-format", "json")
	if e.Admin, err = e.Test.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	e.logf("kube-apiserver %s ready in %s", e.Admin.Host, time.Since(start).Round(time.Millisecond))
	if e.Client, err = client.New(e.Admin, client.Options{Scheme: app.Scheme()}); err != nil {
		return nil, err
	}
	if e.AdminKubeconfig, err = e.writeKubeconfig("admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}); err != nil {
		return nil, err
	}
	if !o.NoControllerManager {
		if err = e.startControllerManager(assets); err != nil {
			return nil, err
		}
	}

	e.Sim = runaitest.New(o.Seed)
	if err = e.Sim.Start("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("starting the Run:ai simulator: %w", err)
	}
	e.logf("Run:ai simulator on %s", e.Sim.URL())

	if o.CertRotation {
		e.certRotation = true
		// Without the admission policies every pod goes through the
		// webhooks, so the admissions the rotation tests keep running
		// exercise the certificates (with them, CPU pods never leave the
		// API server).
		data, err := e.RenderChart("certManager.enabled=false", "webhook.admissionPolicies=false")
		if err != nil {
			return nil, err
		}
		if e.objs, err = DecodeObjects(data); err != nil {
			return nil, err
		}
	}
	if err = e.installRBAC(ctx); err != nil {
		return nil, err
	}
	if o.CertRotation {
		e.startSecretProjector(client.ObjectKey{Namespace: ReleaseNamespace, Name: ReleaseName + "-tls"})
	}
	if err = e.startWebhook(ctx, o); err != nil {
		return nil, err
	}
	if err = e.installWebhookConfigurations(ctx); err != nil {
		return nil, err
	}
	if o.CertRotation {
		// As kubelet gates the Service's endpoints: no review before ready.
		if err = e.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	if err = e.waitWebhookServing(ctx); err != nil {
		return nil, err
	}
	if !o.CertRotation {
		e.Controller = <-e.ctlCh
	}
	e.logf("test bed up in %s", time.Since(start).Round(time.Millisecond))
	return e, nil
}

// auditPolicy logs the metadata of the webhook user's requests, nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["` + WebhookUser + `"]
- level: None
`

// writeKubeconfig provisions user and writes a kubeconfig for kubectl.
func (e *Env) writeKubeconfig(file string, u envtest.User) (string, error) {
	var kc []byte
	if e.Existing {
		// No CA to sign client certificates with: impersonate the user.
		var err error
		if kc, err = kubeconfigFor(e.Admin, u); err != nil {
			return "", err
		}
	} else {
		au, err := e.Test.AddUser(u, nil)
		if err != nil {
			return "", fmt.Errorf("provisioning user %s: %w", u.Name, err)
		}
		if kc, err = au.KubeConfig(); err != nil {
			return "", err
		}
	}
	path := filepath.Join(e.Dir, file+".kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}

// UserKubeconfig provisions a user (client certificate) and returns the path
// of a kubeconfig for kubectl --kubeconfig.
func (e *Env) UserKubeconfig(name string, groups ...string) (string, error) {
	return e.writeKubeconfig(strings.NewReplacer(":", "_", "/", "_").Replace(name), envtest.User{Name: name, Groups: groups})
}

// UserConfig provisions a user and returns its REST config.
func (e *Env) UserConfig(name string, groups ...string) (*rest.Config, error) {
	if e.Existing {
		c := rest.CopyConfig(e.Admin)
		c.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: groups}
		return c, nil
	}
	au, err := e.Test.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return au.Config(), nil
}

func (e *Env) startControllerManager(assets string) error {
	logPath := filepath.Join(e.Dir, "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+e.AdminKubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		// clusterrole-aggregation fills the built-in view/edit/admin roles
		// from the chart's aggregated ClusterRoles (the GPU view's access).
		"--controllers=namespace,deployment,replicaset,job,garbagecollector,clusterrole-aggregation",
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		"--kube-api-qps=200", "--kube-api-burst=400",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so Stop can end it and anything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	e.kcm, e.kcmDone = cmd, make(chan error, 1)
	go func() { e.kcmDone <- cmd.Wait(); logFile.Close() }()
	e.logf("kube-controller-manager pid %d (log %s)", cmd.Process.Pid, logPath)
	return nil
}

// installRBAC applies the chart's ServiceAccount, ClusterRole, Role and
// bindings, so the webhook runs with exactly the rights users install.
func (e *Env) installRBAC(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ReleaseNamespace}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ReleaseNamespace, err)
	}
	objs, err := e.manifests()
	if err != nil {
		return err
	}
	n := 0
	for _, o := range objs {
		switch o.(type) {
		case *corev1.ServiceAccount, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding, *corev1.Secret:
			if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("applying %T %s from %s: %w", o, o.GetName(), e.manifestSource(), err)
			}
			n++
		}
	}
	e.logf("applied %d RBAC objects from %s", n, e.manifestSource())
	return nil
}

// InstallObjects decodes manifests/install.yaml (the rendered Helm chart).
func (e *Env) InstallObjects() ([]client.Object, error) {
	path := filepath.Join(e.Root, "manifests", "install.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s (run `make manifests`): %w", path, err)
	}
	return DecodeObjects(data)
}

// DecodeObjects decodes a multi-document YAML stream into typed objects of
// the kinds the harness applies; other kinds are skipped.
func DecodeObjects(data []byte) ([]client.Object, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []client.Object
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding manifests: %w", err)
		}
		if raw == nil {
			continue
		}
		var obj client.Object
		switch raw["kind"] {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "Secret":
			obj = &corev1.Secret{}
		case "MutatingWebhookConfiguration":
			obj = &admissionregistrationv1.MutatingWebhookConfiguration{}
		case "ValidatingWebhookConfiguration":
			obj = &admissionregistrationv1.ValidatingWebhookConfiguration{}
		case "MutatingAdmissionPolicy":
			obj = &admissionregistrationv1.MutatingAdmissionPolicy{}
		case "MutatingAdmissionPolicyBinding":
			obj = &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
		case "ValidatingAdmissionPolicy":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		default:
			continue
		}
		if err := remarshal(raw, obj); err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (e *Env) startWebhook(ctx context.Context, o Options) error {
	e.CertDir = filepath.Join(e.Dir, "tls")
	if o.CertRotation {
		// Empty, like the optional mount of the chart's empty Secret.
		if err := os.MkdirAll(e.CertDir, 0o700); err != nil {
			return err
		}
	} else {
		pair, err := certs.Generate([]string{"127.0.0.1"}, 24*time.Hour)
		if err != nil {
			return err
		}
		if err := pair.Write(e.CertDir); err != nil {
			return err
		}
	}
	secretFile := filepath.Join(e.Dir, "client-secret")
	if err := os.WriteFile(secretFile, []byte(ClientSecret+"\n"), 0o600); err != nil {
		return err
	}
	cfg := config.Default()
	cfg.RunAIEnable = true
	cfg.RunAIURL = e.Sim.URL()
	cfg.RunAIClientID = ClientID
	cfg.RunAIClientSecretFile = secretFile
	cfg.ReconcileInterval = time.Hour // tests run passes themselves
	cfg.WebhookUser = WebhookUser
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	if err := cfg.Validate(os.ReadFile); err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	e.Config = cfg
	port, err := freePort()
	if err != nil {
		return err
	}
	rc, err := e.UserConfig(WebhookUser, "system:serviceaccounts", "system:serviceaccounts:"+ReleaseNamespace)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 200, 400
	log := logr.Discard()
	if o.WebhookLog != nil {
		log = funcr.NewJSON(func(s string) { fmt.Fprintln(o.WebhookLog, s) }, funcr.Options{Verbosity: 1})
	}
	ctrllog.SetLogger(log)
	appCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancelApp, e.appDone, e.ctlCh = cancel, make(chan error, 1), make(chan *bind.Controller, 1)
	e.WebhookURL = "https://127.0.0.1:" + strconv.Itoa(port)
	ao := app.Options{
		Config: cfg, RestConfig: rc, Serve: true, Reconcile: true,
		WebhookHost: "127.0.0.1", WebhookPort: port, CertDir: e.CertDir,
		MetricsAddr: "0", HealthAddr: "0", GracefulShutdown: 2 * time.Second,
		Log: log, OnController: func(c *bind.Controller) { e.ctlCh <- c },
		// As in the chart's reconcile container: the controller leads
		// through a Lease in the release namespace.
		LeaderElection: true, LeaderElectionNamespace: ReleaseNamespace,
	}
	if o.CertRotation {
		hp, err := freePort()
		if err != nil {
			return err
		}
		e.WebhookURL = "https://localhost:" + strconv.Itoa(port)
		e.HealthURL = "http://127.0.0.1:" + strconv.Itoa(hp)
		ao.HealthAddr = "127.0.0.1:" + strconv.Itoa(hp)
		ao.Reconcile, ao.OnController = false, nil
		ao.CertRotation = true
		ao.CertSecretNamespace, ao.CertSecretName = ReleaseNamespace, ReleaseName+"-tls"
		ao.WebhookConfigName = ReleaseName
		ao.CertDNSNames = []string{"localhost"}
	}
	e.WebhookStarts++
	e.webhookStarted = time.Now()
	go func() { e.appDone <- app.Run(appCtx, ao) }()
	e.logf("webhook serving on %s as user %s", e.WebhookURL, WebhookUser)
	return nil
}

// installWebhookConfigurations loads the production webhook configurations
// from manifests/install.yaml and rewrites only clientConfig: the service
// becomes the local URL and the CA bundle the local CA. The admission
// policies and their bindings are loaded as they are, and only with the
// integration on: the chart renders them only with run_ai_enable.
func (e *Env) installWebhookConfigurations(ctx context.Context) error {
	objs, err := e.manifests()
	if err != nil {
		return err
	}
	return e.installAdmission(ctx, objs)
}

// InstallAdmission replaces everything of ours on the admission path (the
// webhook configurations, the admission policies and their bindings) with
// those among objs, installed as at start-up: for tests of another
// rendering of the chart (RenderChart).
func (e *Env) InstallAdmission(ctx context.Context, objs []client.Object) error {
	for _, o := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName}},
		&admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-inject"}},
		&admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-inject"}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-pods"}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-pods"}},
	} {
		if err := e.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T %s: %w", o, o.GetName(), err)
		}
	}
	e.Policies = 0
	copied := make([]client.Object, len(objs))
	for i, o := range objs {
		copied[i] = o.DeepCopyObject().(client.Object)
	}
	return e.installAdmission(ctx, copied)
}

// installAdmission creates the webhook configurations (clientConfig
// rewritten) and, with the integration on, the admission policies among
// objs, which it may modify.
func (e *Env) installAdmission(ctx context.Context, objs []client.Object) error {
	var err error
	if errs := CheckWebhookConfigurations(objs, e.Config.ProjectLabel, e.Config.QueueLabelKey); len(errs) > 0 {
		return fmt.Errorf("manifests/install.yaml breaks the admission policy: %w", errors.Join(errs...))
	}
	var ca []byte // CertRotation: none, the webhook's rotator injects it
	if !e.certRotation {
		if ca, err = os.ReadFile(filepath.Join(e.CertDir, "ca.crt")); err != nil {
			return err
		}
	}
	n := 0
	for _, o := range objs {
		switch w := o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for i := range w.Webhooks {
				w.Webhooks[i].ClientConfig = e.localClientConfig(w.Webhooks[i].ClientConfig, ca)
			}
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			for i := range w.Webhooks {
				w.Webhooks[i].ClientConfig = e.localClientConfig(w.Webhooks[i].ClientConfig, ca)
			}
		case *admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding,
			*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			if !e.Config.RunAIEnable {
				continue
			}
			if err := e.Client.Create(ctx, o); err != nil {
				return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
			}
			e.Policies++
			e.logf("loaded %T %s from %s", o, o.GetName(), e.manifestSource())
			continue
		default:
			continue
		}
		if err := e.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
		n++
		e.logf("loaded %T %s from %s (clientConfig rewritten to %s)", o, o.GetName(), e.manifestSource(), e.WebhookURL)
	}
	if n != 2 {
		return fmt.Errorf("manifests/install.yaml holds %d webhook configurations, want 2", n)
	}
	return nil
}

func (e *Env) localClientConfig(c admissionregistrationv1.WebhookClientConfig, ca []byte) admissionregistrationv1.WebhookClientConfig {
	path := "/"
	if c.Service != nil && c.Service.Path != nil {
		path = *c.Service.Path
	}
	url := e.WebhookURL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
}

// waitWebhookServing waits until the API server calls our webhooks: a
// dry-run create of a namespace that spoofs a binding label must be refused
// with our message.
func (e *Env) waitWebhookServing(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	probe := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"probe-webhook","labels":{%q:"probe",%q:"spoofed"}}}`,
		e.Config.ProjectLabel, e.Config.QueueLabelKey)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-e.appDone:
			return fmt.Errorf("the webhook exited during start-up: %v", err)
		default:
		}
		_, stderr, err := e.Kubectl(ctx, probe, "create", "--dry-run=server", "-f", "-")
		if err != nil && strings.Contains(stderr, "written only by runai-webhook") {
			e.logf("webhook answers through the API server")
			return nil
		}
		last = stderr
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the webhook did not answer through the API server within 60s (last kubectl output: %s)", strings.TrimSpace(last))
}

// Kubectl runs the built kubectl (never the one on PATH) as the admin, with
// stdin, and returns stdout and stderr (warnings land on stderr).
func (e *Env) Kubectl(ctx context.Context, stdin string, args ...string) (string, string, error) {
	return e.KubectlAs(ctx, e.AdminKubeconfig, stdin, args...)
}

// KubectlAs runs kubectl with another kubeconfig.
func (e *Env) KubectlAs(ctx context.Context, kubeconfig, stdin string, args ...string) (string, string, error) {
	assets, err := Assets(e.Root)
	if err != nil {
		return "", "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// Stop tears everything down: the webhook, kube-controller-manager, the API
// server and etcd, and the simulator. It leaves no process behind.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	if e.cancelApp != nil {
		e.cancelApp()
		select {
		case <-e.appDone:
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("the webhook did not stop within 10s"))
		}
	}
	if e.stopProjector != nil {
		e.stopProjector()
		<-e.projectorDone
	}
	if e.kcm != nil && e.kcm.Process != nil {
		_ = syscall.Kill(-e.kcm.Process.Pid, syscall.SIGTERM)
		select {
		case <-e.kcmDone:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-e.kcm.Process.Pid, syscall.SIGKILL)
			<-e.kcmDone
		}
	}
	if e.Test != nil && e.Admin != nil {
		if err := e.Test.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping the control plane: %w", err))
		}
	}
	if e.Sim != nil {
		e.Sim.Close()
	}
	if e.Dir != "" && len(errs) == 0 {
		_ = os.RemoveAll(e.Dir)
	}
	return errors.Join(errs...)
}

// KubeconfigBytes returns the admin kubeconfig, for clients built in tests.
func (e *Env) KubeconfigBytes() ([]byte, error) { return os.ReadFile(e.AdminKubeconfig) }

// RestConfigFrom loads a REST config from a kubeconfig file.
func RestConfigFrom(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
