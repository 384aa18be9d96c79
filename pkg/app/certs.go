package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Built-in certificates (certManager.enabled=false in the chart).
//
// cert-controller's rotator, as kueue and Gatekeeper embed it, keeps a CA and
// a serving certificate in the Secret CertSecretNamespace/CertSecretName
// (created empty by the chart; the rotator only gets and updates it), injects
// the CA into the caBundle of every webhook of the Mutating and Validating
// configurations named WebhookConfigName (whether their clientConfig names a
// Service or a URL), re-injects it when they change (a helm upgrade), and
// renews the certificate 90 days before it expires (checked every 12 hours
// and on every change of the Secret). Every serving replica runs it; the
// Secret's resourceVersion settles races between replicas.
//
// The rotator writes no files: kubelet projects the Secret into CertDir (the
// chart mounts tls.crt and tls.key only, never ca.key) and replaces the files
// when the Secret changes. The server reads them through servingCert, which
// tolerates their absence at start (an empty Secret mounts as an empty
// folder, and controller-runtime's server would otherwise exit) and reloads
// them when they change, so a rotation needs no restart. The "certs"
// readiness check fails until a certificate is loaded and the rotator has
// injected its CA, so no replica receives reviews before callers trust it.
//
// Caveat, as with Gatekeeper: when the CA itself is renewed (every ~10 years,
// or when the Secret is emptied), the new caBundle is injected before kubelet
// has projected the new certificate into each pod (up to kubelet's sync
// period, about a minute); reviews fail TLS in between. Server-certificate
// renewals keep the CA and are seamless.

const (
	rotatorCAName       = "runai-webhook-ca"
	rotatorOrganization = "hopsworks"
	certFile            = "tls.crt"
	keyFile             = "tls.key"
)

// setupCertRotation adds the rotator, the serving-certificate loader and the
// "certs" readiness check to mgr when o.CertRotation is on (and the process
// serves). ready is closed once certificates are in CertDir and the CA is
// injected; it is nil when rotation is off.
func setupCertRotation(mgr ctrl.Manager, o Options) (ready chan struct{}, err error) {
	if !o.CertRotation || !o.Serve {
		return nil, nil
	}
	var missing []string
	for name, v := range map[string]string{"cert secret namespace": o.CertSecretNamespace, "cert secret name": o.CertSecretName,
		"webhook configuration name": o.WebhookConfigName, "cert dir": o.CertDir} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(o.CertDNSNames) == 0 {
		missing = append(missing, "certificate DNS names")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("certificate rotation needs: %v", missing)
	}
	srv, ok := mgr.GetWebhookServer().(*webhook.DefaultServer)
	if !ok {
		return nil, fmt.Errorf("certificate rotation needs controller-runtime's default webhook server, not %T", mgr.GetWebhookServer())
	}
	ready = make(chan struct{})
	cr := &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.CertSecretNamespace, Name: o.CertSecretName},
		CertDir:        o.CertDir,
		CAName:         rotatorCAName,
		CAOrganization: rotatorOrganization,
		DNSName:        o.CertDNSNames[0],
		ExtraDNSNames:  o.CertDNSNames[1:],
		IsReady:        ready,
		Webhooks: []rotator.WebhookInfo{
			{Name: o.WebhookConfigName, Type: rotator.Mutating},
			{Name: o.WebhookConfigName, Type: rotator.Validating},
		},
		FieldOwner:     "runai-webhook",
		ControllerName: rotatorControllerName(),
		// Inject the CA only once this replica's files are there.
		EnableReadinessCheck: true,
		// Reload, never exit: servingCert picks up the new files.
		RestartOnSecretRefresh: false,
	}
	if err := rotator.AddRotator(mgr, cr); err != nil {
		return nil, fmt.Errorf("adding the certificate rotator: %w", err)
	}
	sc := &servingCert{certPath: filepath.Join(o.CertDir, certFile), keyPath: filepath.Join(o.CertDir, keyFile)}
	srv.Options.TLSOpts = append(srv.Options.TLSOpts, func(c *tls.Config) { c.GetCertificate = sc.GetCertificate })
	if err := mgr.Add(sc); err != nil {
		return nil, fmt.Errorf("adding the serving-certificate loader: %w", err)
	}
	if err := mgr.AddReadyzCheck("certs", certsReady(ready, sc)); err != nil {
		return nil, fmt.Errorf("adding certificate readiness check: %w", err)
	}
	return ready, nil
}

// rotators counts the rotators of this process: controller names must be
// unique per process (tests start several managers).
var rotators atomic.Int32

func rotatorControllerName() string {
	if n := rotators.Add(1); n > 1 {
		return fmt.Sprintf("cert-rotator-%d", n)
	}
	return "cert-rotator"
}

// certsReady passes once the rotator reported ready (files mounted, CA
// injected) and the server holds a certificate.
func certsReady(ready <-chan struct{}, sc *servingCert) func(*http.Request) error {
	return func(*http.Request) error {
		select {
		case <-ready:
		default:
			return errors.New("certificate rotator not ready: certificate not mounted or CA not injected yet")
		}
		if !sc.Loaded() {
			return errors.New("no serving certificate loaded yet")
		}
		return nil
	}
}

// servingCert serves the certificate in certPath/keyPath, loading it as soon
// as the files exist and reloading it when they change (controller-runtime's
// certwatcher: file events, kubelet's symlink swaps, and a 10 s poll).
type servingCert struct {
	certPath, keyPath string
	// poll is how often missing files are looked for (default 500 ms).
	poll time.Duration

	mu sync.RWMutex
	w  *certwatcher.CertWatcher
}

// GetCertificate is tls.Config.GetCertificate: it fails the handshake until a
// certificate is loaded.
func (s *servingCert) GetCertificate(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	w := s.w
	s.mu.RUnlock()
	if w == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return w.GetCertificate(h)
}

// Loaded reports whether a certificate is being served.
func (s *servingCert) Loaded() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w != nil
}

// Start waits for the files, then watches them until ctx ends.
func (s *servingCert) Start(ctx context.Context) error {
	poll := s.poll
	if poll == 0 {
		poll = 500 * time.Millisecond
	}
	var w *certwatcher.CertWatcher
	err := wait.PollUntilContextCancel(ctx, poll, true, func(context.Context) (bool, error) {
		var err error
		w, err = certwatcher.New(s.certPath, s.keyPath)
		return err == nil, nil
	})
	if err != nil {
		return nil // ctx ended before a certificate appeared
	}
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
	return w.Start(ctx)
}

// NeedLeaderElection: every serving replica serves.
func (s *servingCert) NeedLeaderElection() bool { return false }
