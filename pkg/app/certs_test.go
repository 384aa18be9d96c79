package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/hopsworks/runai-webhook/certs"
)

func leafOf(t *testing.T, pemData []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(pemData)
	require.NotNil(t, b)
	_, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return b.Bytes
}

// The server starts before the Secret is mounted: handshakes fail until the
// files appear, then the certificate is served and reloaded on change.
func TestServingCertWaitsForFilesThenReloads(t *testing.T) {
	dir := t.TempDir()
	sc := &servingCert{certPath: filepath.Join(dir, certFile), keyPath: filepath.Join(dir, keyFile), poll: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.Start(ctx) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })

	time.Sleep(100 * time.Millisecond)
	_, err := sc.GetCertificate(&tls.ClientHelloInfo{})
	assert.ErrorContains(t, err, "no serving certificate loaded yet")
	assert.False(t, sc.Loaded())

	first, err := certs.Generate([]string{"localhost"}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, first.Write(dir))
	require.Eventually(t, sc.Loaded, 5*time.Second, 10*time.Millisecond, "loaded once the files exist")
	got, err := sc.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	assert.Equal(t, leafOf(t, first.Cert), got.Certificate[0])

	second, err := certs.Generate([]string{"localhost"}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, second.Write(dir))
	assert.Eventually(t, func() bool {
		c, err := sc.GetCertificate(&tls.ClientHelloInfo{})
		return err == nil && string(c.Certificate[0]) == string(leafOf(t, second.Cert))
	}, 15*time.Second, 20*time.Millisecond, "the replaced files are served without a restart")
}

func TestServingCertStopsWithoutFiles(t *testing.T) {
	dir := t.TempDir()
	sc := &servingCert{certPath: filepath.Join(dir, certFile), keyPath: filepath.Join(dir, keyFile), poll: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.NoError(t, sc.Start(ctx), "ending before a certificate appeared is not an error")
	assert.False(t, sc.Loaded())
}

func TestCertsReadyNeedsRotatorAndCertificate(t *testing.T) {
	dir := t.TempDir()
	pair, err := certs.Generate([]string{"localhost"}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, pair.Write(dir))
	loaded := &servingCert{certPath: filepath.Join(dir, certFile), keyPath: filepath.Join(dir, keyFile)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = loaded.Start(ctx) }()
	require.Eventually(t, loaded.Loaded, 5*time.Second, 10*time.Millisecond)
	empty := &servingCert{}
	open, closed := make(chan struct{}), make(chan struct{})
	close(closed)

	assert.ErrorContains(t, certsReady(open, loaded)(nil), "rotator not ready")
	assert.ErrorContains(t, certsReady(closed, empty)(nil), "no serving certificate loaded yet")
	assert.NoError(t, certsReady(closed, loaded)(nil))
}

func newTestManager(t *testing.T) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme: Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{Port: 0}),
	})
	require.NoError(t, err)
	return mgr
}

func TestSetupCertRotation(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		ready, err := setupCertRotation(newTestManager(t), Options{Serve: true})
		assert.NoError(t, err)
		assert.Nil(t, ready)
		ready, err = setupCertRotation(newTestManager(t), Options{Serve: false, CertRotation: true})
		assert.NoError(t, err, "the reconcile process needs no certificate")
		assert.Nil(t, ready)
	})
	t.Run("incomplete", func(t *testing.T) {
		_, err := setupCertRotation(newTestManager(t), Options{Serve: true, CertRotation: true, CertDir: "/tmp/x"})
		require.Error(t, err)
		for _, want := range []string{"cert secret namespace", "cert secret name", "webhook configuration name", "certificate DNS names"} {
			assert.ErrorContains(t, err, want)
		}
	})
	t.Run("on", func(t *testing.T) {
		mgr := newTestManager(t)
		ready, err := setupCertRotation(mgr, Options{
			Serve: true, CertRotation: true, CertDir: t.TempDir(),
			CertSecretNamespace: "runai-webhook", CertSecretName: "runai-webhook-tls", WebhookConfigName: "runai-webhook",
			CertDNSNames: []string{"runai-webhook.runai-webhook.svc", "runai-webhook.runai-webhook.svc.cluster.local"},
		})
		require.NoError(t, err)
		require.NotNil(t, ready)
		// The server's TLS configuration takes its certificate from the loader,
		// so controller-runtime does not insist on files at start.
		cfg := &tls.Config{}
		for _, opt := range mgr.GetWebhookServer().(*webhook.DefaultServer).Options.TLSOpts {
			opt(cfg)
		}
		require.NotNil(t, cfg.GetCertificate)
		_, err = cfg.GetCertificate(&tls.ClientHelloInfo{})
		assert.ErrorContains(t, err, "no serving certificate loaded yet")
	})
}
