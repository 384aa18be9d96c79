//go:build certmanager

package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/app"
)

// The chart's default install (certManager.enabled=true) with a real
// cert-manager v1.11.5 (controller and cainjector built from Go modules by
// `make testbin-certmanager`) on a control plane of its own: the chart's
// self-signed Issuer and Certificate produce the Secret the Deployment
// mounts, and cainjector puts its CA into our webhook configurations through
// their cert-manager.io/inject-ca-from annotation. Run with
// `make e2e-certmanager`.
func TestCertManagerIssuesAndInjects(t *testing.T) {
	if framework.UseExistingCluster() {
		t.Skip("starts a control plane of its own (on kind, hack/e2e-kind.sh installs cert-manager)")
	}
	root, err := framework.FindRoot()
	require.NoError(t, err)
	assets, err := framework.Assets(root)
	require.NoError(t, err)
	for _, b := range []string{"cert-manager-controller", "cert-manager-cainjector"} {
		_, err := os.Stat(filepath.Join(assets, b))
		require.NoError(t, err, "%s is built by `make testbin-certmanager`", b)
	}
	begin := time.Now()

	// cert-manager's CRDs ship in its module's deploy/crds, with Helm
	// template strings in their labels: drop the labels.
	crds := certManagerCRDs(t, root)
	local := false
	te := &envtest.Environment{
		BinaryAssetsDirectory: assets, UseExistingCluster: &local,
		CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds},
	}
	te.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1").Set("endpoint-reconciler-type", "none")
	rc, err := te.Start()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, te.Stop()) })
	t.Logf("control plane with %d cert-manager CRDs established in %s", len(crds), time.Since(begin).Round(time.Millisecond))
	c, err := client.New(rc, client.Options{Scheme: app.Scheme()})
	require.NoError(t, err)
	au, err := te.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kc, err := au.KubeConfig()
	require.NoError(t, err)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kc, 0o600))

	// The chart's default rendering: Issuer, Certificate and the annotated
	// webhook configurations (their Service is never called here).
	data, err := os.ReadFile(filepath.Join(root, "manifests", "install.yaml"))
	require.NoError(t, err)
	ctx := ctxT(t, 3*time.Minute)
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.ReleaseNamespace}}))
	var certName string
	applied := map[string]int{}
	for _, u := range decodeUnstructured(t, data) {
		switch u.GetKind() {
		case "Issuer", "Certificate", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		default:
			continue
		}
		if u.GetKind() == "Certificate" {
			certName = u.GetName()
		} else if strings.HasSuffix(u.GetKind(), "WebhookConfiguration") {
			assert.Equal(t, framework.ReleaseNamespace+"/"+framework.ReleaseName+"-serving", u.GetAnnotations()["cert-manager.io/inject-ca-from"], u.GetKind())
		}
		require.NoError(t, c.Create(ctx, u), "%s %s", u.GetKind(), u.GetName())
		applied[u.GetKind()]++
	}
	require.Equal(t, map[string]int{"Issuer": 1, "Certificate": 1, "MutatingWebhookConfiguration": 1, "ValidatingWebhookConfiguration": 1}, applied)

	started := time.Now()
	startProcess(t, dir, "cert-manager-controller", []string{"KUBECONFIG=" + kubeconfig}, filepath.Join(assets, "cert-manager-controller"),
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--cluster-resource-namespace=kube-system",
		"--metrics-listen-address=127.0.0.1:0",
		"--controllers=issuers,certificaterequests-approver,certificaterequests-issuer-selfsigned,certificates-trigger,certificates-key-manager,certificates-request-manager,certificates-issuing,certificates-readiness")
	startProcess(t, dir, "cert-manager-cainjector", []string{"KUBECONFIG=" + kubeconfig}, filepath.Join(assets, "cert-manager-cainjector"),
		"--kubeconfig="+kubeconfig, "--leader-elect=false")

	// The Secret the Deployment mounts, issued for the Service's names.
	key := client.ObjectKey{Namespace: framework.ReleaseNamespace, Name: framework.ReleaseName + "-tls"}
	var sec corev1.Secret
	require.Eventually(t, func() bool {
		return c.Get(ctx, key, &sec) == nil && len(sec.Data["tls.crt"]) > 0 && len(sec.Data["ca.crt"]) > 0
	}, 90*time.Second, 200*time.Millisecond, "cert-manager issues %s", key)
	issued := time.Since(started)
	leaf := parsePEMCert(t, sec.Data["tls.crt"])
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(sec.Data["ca.crt"]))
	svc := framework.ReleaseName + "." + framework.ReleaseNamespace + ".svc"
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: svc, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	assert.NoError(t, err, "the certificate is valid for %s under ca.crt", svc)
	assert.ElementsMatch(t, []string{svc, svc + ".cluster.local"}, leaf.DNSNames)
	t.Logf("Secret %s issued %s after cert-manager started: %s; ca.crt is the certificate itself: %t (SelfSigned issuer)",
		key, issued.Round(time.Millisecond), leafInfo(leaf), bytes.Equal(sec.Data["ca.crt"], sec.Data["tls.crt"]))

	cert := &unstructured.Unstructured{}
	cert.SetAPIVersion("cert-manager.io/v1")
	cert.SetKind("Certificate")
	require.Eventually(t, func() bool {
		if c.Get(ctx, client.ObjectKey{Namespace: framework.ReleaseNamespace, Name: certName}, cert) != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
		for _, cd := range conds {
			m, _ := cd.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "True" {
				return true
			}
		}
		return false
	}, 60*time.Second, 200*time.Millisecond, "Certificate %s Ready", certName)

	// cainjector: every webhook of both configurations trusts the Secret's CA.
	require.Eventually(t, func() bool { return caBundlesAre(c, sec.Data["ca.crt"]) }, 90*time.Second, 200*time.Millisecond,
		"cainjector injects ca.crt into both webhook configurations")
	t.Logf("CA injected into both webhook configurations %s after cert-manager started", time.Since(started).Round(time.Millisecond))
	var m admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: framework.ReleaseName}, &m))
	for _, w := range m.Webhooks {
		assert.NotNil(t, w.ClientConfig.Service, "%s keeps its Service clientConfig", w.Name)
	}
}

func certManagerCRDs(t *testing.T, root string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = filepath.Join(root, "tools", "certmanager")
	out, err := cmd.Output()
	require.NoError(t, err, "locating cert-manager's module (make testbin-certmanager downloads it)")
	crdDir := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	files, err := filepath.Glob(filepath.Join(crdDir, "crd-*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "CRDs in %s", crdDir)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(crd), f)
		crd.Labels = nil // '{{ template "cert-manager.name" . }}' and the like
		crds = append(crds, crd)
	}
	return crds
}

func decodeUnstructured(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			require.NoError(t, err)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// startProcess runs a binary in its own process group, logging to
// dir/<name>.log, and stops it (by its pid) when the test ends; its log's
// tail is shown when the test fails.
func startProcess(t *testing.T, dir, name string, env []string, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	t.Logf("%s pid %d (log %s)", name, cmd.Process.Pid, logPath)
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("%s log (tail):\n%s", name, tail(string(data), 6<<10))
		}
	})
}

func parsePEMCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	require.NotNil(t, b)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}
