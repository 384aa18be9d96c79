package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
)

// Built-in certificates (chart: certManager.enabled=false), in a test bed of
// their own: the chart's RBAC and empty Secret, webhook configurations with a
// URL and no caBundle, the webhook serving with its rotator, the harness
// projecting the Secret into the cert dir as kubelet does. The rotator must
// fill the Secret, inject its CA into URL-based clientConfigs, serve, and
// rotate the serving certificate and the CA without a restart.
func TestCertRotation(t *testing.T) {
	if framework.UseExistingCluster() {
		t.Skip("starts a control plane of its own")
	}
	begin := time.Now()
	logs := &lockedBuffer{}
	ce, err := framework.Start(ctxT(t, 2*time.Minute), framework.Options{
		Seed: Seed(), CertRotation: true, NoControllerManager: true, Log: testLog{t}, WebhookLog: logs,
	})
	if err != nil {
		t.Logf("webhook log:\n%s", logs.String())
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("webhook log (last 8 KiB):\n%s", tail(logs.String(), 8<<10))
		}
		assert.NoError(t, ce.Stop())
	})
	t.Logf("second test bed (built-in certificates) serving in %s", time.Since(begin).Round(time.Millisecond))
	c, ctx := ce.Client, ctxT(t, 90*time.Second)
	secretKey := client.ObjectKey{Namespace: framework.ReleaseNamespace, Name: framework.ReleaseName + "-tls"}
	host := webhookHost(t, ce.WebhookURL)

	// 1. The rotator filled the chart's empty Secret and injected its CA
	// into every webhook of both configurations, keeping their URLs.
	sec := getSecret(t, c, secretKey)
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		require.NotEmpty(t, sec.Data[k], "Secret key %s", k)
	}
	ca1 := sec.Data["ca.crt"]
	t.Logf("CA %s, serving certificate %s", describe(t, ca1), describe(t, sec.Data["tls.crt"]))
	assertCABundles(t, c, ca1, ce.WebhookURL)

	// 2. Ready only with a certificate loaded and the CA injected: the bed
	// polled /readyz from the webhook's start and saw "certs" failing first.
	t.Logf("ready %s after the webhook started; checks failing before: %v", ce.ReadyAfter.Round(time.Millisecond), ce.NotReadyChecks)
	assert.Contains(t, ce.NotReadyChecks, "certs", "not ready before a certificate is loaded and the CA injected")
	code, body := get(t, ce.HealthURL+"/readyz?verbose")
	assert.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "[+]certs ok")
	assert.Contains(t, body, "[+]webhook ok")

	// 3. A pod of a managed namespace is admitted and mutated: its first pod
	// binds the namespace (no controller runs here) and gets queue and scheduler.
	ns := "e2e-certs"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{projectLabel: ns, deptLabel: "research"}}}))
	pod := corePod(ns, "first", "job", 0)
	require.NoError(t, c.Create(ctx, pod))
	assert.Equal(t, ns, pod.Labels[queueLabel])
	assert.Equal(t, "runai-scheduler", pod.Spec.SchedulerName)

	leaf1 := servedLeaf(t, host, ca1)
	t.Logf("served before rotation: %s", leafInfo(leaf1))

	// Admissions run without pause through both rotations (dry-run pod
	// creates through the API server; each must come back mutated).
	adm := startAdmissions(c, ns)
	t.Cleanup(adm.stop)

	// 4. Server-certificate rotation: the certificate in the Secret is
	// replaced by one of the same CA that expires in an hour, inside the
	// rotator's 90-day look-ahead, as if the year had passed. The rotator
	// issues a new one on the Secret's change; the server reloads it.
	caKey := sec.Data["ca.key"]
	short := signedBy(t, ca1, caKey, time.Hour)
	t0 := time.Now()
	updateSecret(t, c, secretKey, func(s *corev1.Secret) { s.Data["tls.crt"], s.Data["tls.key"] = short.cert, short.key })
	okBefore, failBefore := adm.counts()
	var leaf2 *x509.Certificate
	require.Eventually(t, func() bool {
		l := tryServedLeaf(host, ca1)
		if l != nil && fingerprint(l) != fingerprint(leaf1) && l.NotAfter.After(time.Now().Add(300*24*time.Hour)) {
			leaf2 = l
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "a renewed certificate is served")
	took := time.Since(t0)
	time.Sleep(time.Second) // admissions on the renewed certificate
	ok, fail := adm.counts()
	t.Logf("served after server-certificate rotation (%s after the Secret changed): %s", took.Round(time.Millisecond), leafInfo(leaf2))
	t.Logf("admissions across the server-certificate rotation: %d admitted and mutated, %d failed", ok-okBefore, fail-failBefore)
	assert.Equal(t, int64(0), fail-failBefore, "no admission fails while the serving certificate rotates: %v", adm.errors())
	assert.Equal(t, string(ca1), string(getSecret(t, c, secretKey).Data["ca.crt"]), "the CA is kept")
	assertCABundles(t, c, ca1, ce.WebhookURL)

	// 5. CA rotation: the CA in the Secret expires in an hour. The rotator
	// makes a new CA and certificate, injects the CA, and the server reloads.
	// The API server switches to a fresh TLS client when caBundle changes,
	// so admissions after this go over new connections to the new certificate.
	shortCA := selfSignedCA(t, time.Hour)
	okBefore, failBefore = adm.counts()
	t0 = time.Now()
	updateSecret(t, c, secretKey, func(s *corev1.Secret) { s.Data["ca.crt"], s.Data["ca.key"] = shortCA.cert, shortCA.key })
	var ca2 []byte
	require.Eventually(t, func() bool {
		ca2 = getSecret(t, c, secretKey).Data["ca.crt"]
		return string(ca2) != string(ca1) && string(ca2) != string(shortCA.cert)
	}, 30*time.Second, 50*time.Millisecond, "the rotator makes a new CA")
	require.Eventually(t, func() bool { return caBundlesAre(c, ca2) }, 30*time.Second, 50*time.Millisecond, "the new CA is injected")
	var leaf3 *x509.Certificate
	require.Eventually(t, func() bool { leaf3 = tryServedLeaf(host, ca2); return leaf3 != nil }, 30*time.Second, 50*time.Millisecond, "a certificate of the new CA is served")
	tookCA := time.Since(t0)
	require.Eventually(t, func() bool {
		o, _ := adm.counts()
		return o > okBefore+5
	}, 30*time.Second, 50*time.Millisecond, "admissions resume after the CA rotation")
	ok, fail = adm.counts()
	t.Logf("CA rotated: %s; served %s (%s after the Secret changed)", describe(t, ca2), leafInfo(leaf3), tookCA.Round(time.Millisecond))
	t.Logf("admissions across the CA rotation: %d admitted and mutated, %d failed (TLS window between caBundle injection and reload)", ok-okBefore, fail-failBefore)
	assertCABundles(t, c, ca2, ce.WebhookURL)

	// 6. A configuration that loses its caBundle (a helm upgrade that
	// replaces it) gets it back.
	okBefore, failBefore = adm.counts()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: framework.ReleaseName}, &m))
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = nil
	}
	require.NoError(t, c.Update(ctx, &m))
	t0 = time.Now()
	require.Eventually(t, func() bool { return caBundlesAre(c, ca2) }, 30*time.Second, 50*time.Millisecond, "the CA is injected again")
	tookInject := time.Since(t0)
	require.Eventually(t, func() bool {
		o, _ := adm.counts()
		return o > okBefore+5
	}, 30*time.Second, 50*time.Millisecond, "admissions resume after re-injection")
	ok, fail = adm.counts()
	t.Logf("caBundle removed from the MutatingWebhookConfiguration re-injected in %s; admissions meanwhile: %d admitted and mutated, %d failed", tookInject.Round(time.Millisecond), ok-okBefore, fail-failBefore)

	// 7. The same process served throughout: no restart, no exit.
	adm.stop()
	ok, fail = adm.counts()
	t.Logf("admissions in all: %d admitted and mutated, %d failed; webhook starts: %d", ok, fail, ce.WebhookStarts)
	assert.True(t, ce.WebhookRunning(), "the webhook is still running")
	assert.Equal(t, 1, ce.WebhookStarts, "the webhook never restarted")
	pod = corePod(ns, "after", "job", 0)
	require.NoError(t, c.Create(ctx, pod))
	assert.Equal(t, ns, pod.Labels[queueLabel])
	assert.Equal(t, "runai-scheduler", pod.Spec.SchedulerName)
}

// The Secret projection used by the bed follows kubelet's layout: the
// visible names are symlinks through ..data, swapped atomically.
func TestCertProjectionIsKubeletLayout(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, framework.ProjectAtomically(dir, map[string][]byte{"ca.key": []byte("k")}, framework.ProjectedKeys))
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries, "nothing is projected while the Secret is empty")
	for _, v := range []string{"one", "two"} {
		require.NoError(t, framework.ProjectAtomically(dir, map[string][]byte{"tls.crt": []byte(v), "tls.key": []byte(v), "ca.key": []byte("k")}, framework.ProjectedKeys))
		got, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
		require.NoError(t, err)
		assert.Equal(t, v, string(got))
	}
	link, err := os.Readlink(filepath.Join(dir, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("..data", "tls.crt"), link)
	_, err = os.Stat(filepath.Join(dir, "ca.key"))
	assert.True(t, os.IsNotExist(err), "the CA key is not mounted")
	entries, _ = os.ReadDir(dir)
	assert.Len(t, entries, 4, "tls.crt, tls.key, ..data and one timestamped folder (the old one removed)")
}

// admissions creates dry-run pods in a loop and counts the outcomes.
type admissions struct {
	ok, fail atomic.Int64
	mu       sync.Mutex
	errs     []string
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
}

func startAdmissions(c client.Client, ns string) *admissions {
	ctx, cancel := context.WithCancel(context.Background())
	a := &admissions{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for i := 0; ctx.Err() == nil; i++ {
			p := corePod(ns, fmt.Sprintf("dry-%05d", i), "job", 0)
			rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
			err := c.Create(rctx, p, client.DryRunAll)
			rcancel()
			switch {
			case ctx.Err() != nil:
			case err == nil && p.Labels[queueLabel] == ns && p.Spec.SchedulerName == "runai-scheduler":
				a.ok.Add(1)
			default:
				a.fail.Add(1)
				a.mu.Lock()
				if len(a.errs) < 10 {
					a.errs = append(a.errs, fmt.Sprintf("%s: err=%v queue=%q scheduler=%q", time.Now().Format("15:04:05.000"), err, p.Labels[queueLabel], p.Spec.SchedulerName))
				}
				a.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return a
}

func (a *admissions) counts() (int64, int64) { return a.ok.Load(), a.fail.Load() }

func (a *admissions) errors() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errs...)
}

func (a *admissions) stop() {
	a.once.Do(func() { a.cancel(); <-a.done })
}

func getSecret(t *testing.T, c client.Client, key client.ObjectKey) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	require.NoError(t, c.Get(context.Background(), key, &s))
	return &s
}

func updateSecret(t *testing.T, c client.Client, key client.ObjectKey, change func(*corev1.Secret)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		if err := c.Get(context.Background(), key, &s); err != nil {
			return err
		}
		change(&s)
		return c.Update(context.Background(), &s)
	}))
}

// caBundlesAre reports whether every webhook of both configurations trusts ca.
func caBundlesAre(c client.Client, ca []byte) bool {
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if c.Get(context.Background(), client.ObjectKey{Name: framework.ReleaseName}, &m) != nil ||
		c.Get(context.Background(), client.ObjectKey{Name: framework.ReleaseName}, &v) != nil {
		return false
	}
	var bundles [][]byte
	for _, w := range m.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, b := range bundles {
		if string(b) != string(ca) {
			return false
		}
	}
	return len(bundles) == len(framework.Policies)
}

func assertCABundles(t *testing.T, c client.Client, ca []byte, webhookURL string) {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: framework.ReleaseName}, &m))
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: framework.ReleaseName}, &v))
	var configs []admissionregistrationv1.WebhookClientConfig
	for _, w := range m.Webhooks {
		configs = append(configs, w.ClientConfig)
	}
	for _, w := range v.Webhooks {
		configs = append(configs, w.ClientConfig)
	}
	require.Len(t, configs, len(framework.Policies), "every webhook of the chart")
	for _, cc := range configs {
		assert.Equal(t, string(ca), string(cc.CABundle), "caBundle is the Secret's CA")
		if assert.NotNil(t, cc.URL) {
			assert.True(t, strings.HasPrefix(*cc.URL, webhookURL+"/"), *cc.URL)
		}
		assert.Nil(t, cc.Service, "the URL clientConfig is kept")
	}
}

func webhookHost(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

// tryServedLeaf dials the webhook as the API server does (server name from
// the URL, trusting only ca) and returns the leaf, or nil when that fails.
func tryServedLeaf(host string, ca []byte) *x509.Certificate {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil
	}
	name, _, _ := strings.Cut(host, ":")
	conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func servedLeaf(t *testing.T, host string, ca []byte) *x509.Certificate {
	t.Helper()
	l := tryServedLeaf(host, ca)
	require.NotNil(t, l, "the webhook serves a certificate of the injected CA for %s", host)
	return l
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:8])
}

func leafInfo(c *x509.Certificate) string {
	return fmt.Sprintf("serial %s, sha256 %s…, DNS %v, not after %s, issuer %q", c.SerialNumber, fingerprint(c), c.DNSNames, c.NotAfter.UTC().Format(time.RFC3339), c.Issuer.CommonName)
}

func describe(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	require.NotNil(t, b)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return leafInfo(c)
}

type pemPair struct{ cert, key []byte }

// signedBy issues a serving certificate for localhost from the rotator's CA
// (PEM certificate and PKCS#1 RSA key, as the rotator stores them).
func signedBy(t *testing.T, caPEM, caKeyPEM []byte, validity time.Duration) pemPair {
	t.Helper()
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	require.NotNil(t, cb)
	require.NotNil(t, kb)
	ca, err := x509.ParseCertificate(cb.Bytes)
	require.NoError(t, err)
	caKey, err := x509.ParsePKCS1PrivateKey(kb.Bytes)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pemPair{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
}

// selfSignedCA is an RSA CA in the rotator's format.
func selfSignedCA(t *testing.T, validity time.Duration) pemPair {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "runai-webhook-ca", Organization: []string{"hopsworks"}},
		DNSNames: []string{"runai-webhook-ca"}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pemPair{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// testLog sends the harness's lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
