// Package app wires the webhook's parts into a controller-runtime manager:
// `serve` (admission webhooks, health, metrics; every replica) and
// `reconcile` (the namespace controller and background pass; one leader at a
// time). The binary and the end-to-end suite both start it through Run, so
// the suite exercises the same wiring operators deploy.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/kube"
	"github.com/hopsworks/runai-webhook/pkg/metrics"
	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/quota"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runaiwatch"
	"github.com/hopsworks/runai-webhook/pkg/validate"
)

// Webhook paths, as the webhook configurations in manifests/ name them.
const (
	PathBind       = "/mutate-pods-bind"
	PathInject     = "/mutate-pods-inject"
	PathPodGuard   = "/validate-pods"
	PathNamespaces = "/validate-namespaces"
	// PathNamespaceLabels guards the binding labels of namespaces that are
	// not (or no longer) Hopsworks projects: no moves, labels only.
	PathNamespaceLabels = "/validate-namespace-labels"
)

// Options configure one process.
type Options struct {
	Config     config.Config
	RestConfig *rest.Config
	// Serve runs the admission webhooks; Reconcile runs the controller and
	// the pass. Both may be on (demo, tests).
	Serve, Reconcile bool
	// WebhookHost/Port/CertDir: the HTTPS server for admission reviews.
	WebhookHost string
	WebhookPort int
	CertDir     string
	// CertRotation: the server manages its own CA and certificate in the
	// Secret CertSecretNamespace/CertSecretName (mounted at CertDir), valid
	// for CertDNSNames, and injects the CA into the webhook configurations
	// named WebhookConfigName (see certs.go).
	CertRotation                        bool
	CertSecretNamespace, CertSecretName string
	WebhookConfigName                   string
	CertDNSNames                        []string
	// MetricsAddr and HealthAddr ("0" disables).
	MetricsAddr, HealthAddr string
	// LeaderElection for the reconcile part; its lease lives in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	// TrustedWriterPrefixes may also write binding labels (Run:ai's controllers).
	TrustedWriterPrefixes []string
	// RunAI overrides the Run:ai client (tests); nil builds one from Config.
	RunAI runai.API
	// OnController, when set, receives the reconcile controller (tests run
	// passes on demand through it).
	OnController func(*bind.Controller)
	// GracefulShutdown is how long in-flight reviews may take at exit.
	GracefulShutdown time.Duration
	Log              logr.Logger
}

// Scheme is the runtime scheme of the manager.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	return s
}

// NewRunAIClient builds the Run:ai client from the configuration.
func NewRunAIClient(cfg config.Config, log logr.Logger) (*runai.Client, error) {
	secret, err := cfg.ClientSecret()
	if err != nil {
		return nil, err
	}
	return runai.NewClient(runai.ClientConfig{
		BaseURL: cfg.RunAIURL, ClientID: cfg.RunAIClientID, ClientSecret: secret, ClusterName: cfg.RunAICluster,
		Logger: log.WithName("runai"), Observer: metrics.Recorder{},
	})
}

// Run starts the manager and blocks until ctx ends.
func Run(ctx context.Context, o Options) error {
	mgr, err := New(o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// New builds the manager without starting it.
func New(o Options) (ctrl.Manager, error) {
	cfg := o.Config
	log := o.Log
	keys := nsview.KeysFrom(cfg)
	if o.GracefulShutdown == 0 {
		o.GracefulShutdown = 25 * time.Second
	}
	mopts := ctrl.Options{
		Scheme:                  Scheme(),
		Logger:                  log,
		Metrics:                 metricsserver.Options{BindAddress: orDefault(o.MetricsAddr, "0")},
		HealthProbeBindAddress:  orDefault(o.HealthAddr, "0"),
		LeaderElection:          o.LeaderElection && o.Reconcile,
		LeaderElectionID:        "runai-webhook-reconcile",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		GracefulShutdownTimeout: &o.GracefulShutdown,
		Cache: cache.Options{
			// Nothing reads managed fields: ~4 MiB less heap per 10,000 namespaces.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}: {Transform: kube.StripPod(cfg.QueueLabelKey)},
			}},
	}
	if o.Serve {
		mopts.WebhookServer = webhook.NewServer(webhook.Options{
			Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) {
				c.MinVersion = tls.VersionTLS12
				c.CipherSuites = modernCiphers
			}},
		})
	}
	mgr, err := ctrl.NewManager(o.RestConfig, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if _, err := setupCertRotation(mgr, o); err != nil {
		return nil, err
	}
	api := o.RunAI
	if api == nil && cfg.RunAIEnable {
		c, err := NewRunAIClient(cfg, log)
		if err != nil {
			return nil, fmt.Errorf("creating the Run:ai client: %w", err)
		}
		api = c
	}
	binder := &bind.Binder{
		RunAI: api, Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Keys: keys,
		DefaultDepartment: cfg.DefaultDepartment, GPUQuota: cfg.ProjectGPUQuota,
		ReadyTimeout: 20 * time.Second, PollInterval: 200 * time.Millisecond,
		Events: mgr.GetEventRecorderFor("runai-webhook"), Log: log.WithName("bind"),
		Enabled: cfg.RunAIEnable, Observer: metrics.Recorder{},
	}
	if o.Serve {
		if err := setupWebhooks(mgr, o, binder, api, keys); err != nil {
			return nil, err
		}
	}
	if o.Reconcile {
		ctl := &bind.Controller{Binder: binder, Client: mgr.GetClient(), Interval: cfg.ReconcileInterval, Log: log.WithName("reconcile"), PassObserver: metrics.Recorder{}}
		if err := ctl.SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if o.OnController != nil {
			o.OnController(ctl)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("caches", cacheSynced(mgr)); err != nil {
		return nil, fmt.Errorf("adding readiness check: %w", err)
	}
	return mgr, nil
}

func setupWebhooks(mgr ctrl.Manager, o Options, binder *bind.Binder, api runai.API, keys nsview.Keys) error {
	cfg := o.Config
	log := o.Log.WithName("admission")
	// Start the pod informer with the manager so readiness waits for it.
	if _, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{}); err != nil {
		return fmt.Errorf("starting the pod cache: %w", err)
	}
	namespaces := kube.Namespaces{Cache: mgr.GetCache(), Live: mgr.GetAPIReader()}
	binder.Namespaces = namespaces
	settings := mutate.Settings{QueueLabelKey: cfg.QueueLabelKey, SchedulerName: cfg.SchedulerName}
	var src quota.Source = unavailableSource{}
	if api != nil {
		src = &quota.RunAISource{API: api, Lookups: binder}
	}
	tracker := &quota.Tracker{Source: src, Pods: kube.Pods{Cache: mgr.GetCache()}, MaxAge: cfg.QuotaMaxAge, ReserveFor: 30 * time.Second}
	guard := &validate.PodGuard{
		Rules: validate.PodRules{QueueLabelKey: cfg.QueueLabelKey, SchedulerName: cfg.SchedulerName},
		Keys:  keys, Namespaces: namespaces, Quota: tracker, Enabled: cfg.RunAIEnable,
	}
	inject := &mutate.Injector{Settings: settings, Keys: keys, Namespaces: namespaces, Enabled: cfg.RunAIEnable}
	bindHook := &mutate.BindHook{Settings: settings, Keys: keys, Namespaces: namespaces, Binder: binder, Guard: guard, Enabled: cfg.RunAIEnable}
	nsGuard := &validate.NamespaceGuard{
		Keys:    keys,
		Writers: validate.Writers{User: cfg.WebhookUser, Prefixes: o.TrustedWriterPrefixes},
		Mover:   binder,
		Enabled: cfg.RunAIEnable,
	}
	srv := mgr.GetWebhookServer()
	obs := metrics.Recorder{}
	// Internal deadlines sit under each webhook's timeoutSeconds in manifests/.
	srv.Register(PathBind, admission.Serve("bind", bindHook.Handle, cfg.BindTimeout+time.Second, obs, log))
	srv.Register(PathInject, admission.Serve("inject", inject.Handle, 2*time.Second, obs, log))
	srv.Register(PathPodGuard, admission.Serve("guard", guard.Handle, 8*time.Second, obs, log))
	srv.Register(PathNamespaces, admission.Serve("namespaces", nsGuard.Handle, 28*time.Second, obs, log))
	labelGuard := &validate.NamespaceGuard{Keys: nsGuard.Keys, Writers: nsGuard.Writers, Enabled: nsGuard.Enabled}
	srv.Register(PathNamespaceLabels, admission.Serve("namespace-labels", labelGuard.Handle, 2*time.Second, obs, log))
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return fmt.Errorf("adding webhook readiness check: %w", err)
	}
	if cfg.RunAIEnable {
		// Run:ai's own admission webhooks gate every pod of a bound
		// namespace: report their availability (metric, log) beside ours.
		if err := mgr.Add(&runaiwatch.Watcher{Reader: mgr.GetAPIReader(), Log: o.Log.WithName("runai-admission"), Report: metrics.SetRunAIAdmission}); err != nil {
			return fmt.Errorf("adding the Run:ai admission watcher: %w", err)
		}
	}
	return setupAPI(mgr, o, binder, api, keys)
}

// unavailableSource answers every quota read with "unreachable" when the
// integration has no Run:ai client (it is off).
type unavailableSource struct{}

func (unavailableSource) ProjectQuota(context.Context, string, string, string, bool) (quota.ProjectQuota, error) {
	return quota.ProjectQuota{}, errors.New("the Run:ai integration is off")
}

func cacheSynced(mgr ctrl.Manager) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced yet")
		}
		return nil
	}
}

// modernCiphers are the TLS 1.2 suites with forward secrecy and AEAD (TLS 1.3
// suites are not configurable and always modern).
var modernCiphers = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

func orDefault(v, d string) string {
	if strings.TrimSpace(v) == "" {
		return d
	}
	return v
}

// Hostname is the pod name for leader-election identity and events.
func Hostname() string {
	h, _ := os.Hostname()
	return h
}
