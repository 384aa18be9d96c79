package manifests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
)

func helm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	bin := filepath.Join("..", "bin", "k8s", "helm")
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		bin = filepath.Join(dir, "helm")
	}
	_, err := os.Stat(bin)
	require.NoError(t, err, "helm is built by `make testbin` into bin/k8s")
	cmd := exec.Command(bin, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

func TestHelmLint(t *testing.T) {
	out, stderr, err := helm(t, "lint", "chart")
	require.NoError(t, err, out+stderr)
	assert.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
}

// install.yaml is what kustomize users and the e2e suite read: it must be the
// chart's current rendering with install-values.yaml.
func TestInstallYAMLIsCurrent(t *testing.T) {
	out, stderr, err := helm(t, "template", "runai-webhook", "chart", "--namespace", "runai-webhook", "-f", "install-values.yaml")
	require.NoError(t, err, stderr)
	have, err := os.ReadFile("install.yaml")
	require.NoError(t, err)
	assert.True(t, string(have) == out, "manifests/install.yaml is stale: run `make manifests`")
}

func TestRenderRefusesKueueWithRunAI(t *testing.T) {
	for _, flags := range [][]string{
		{"--set", "variables.run_ai_enable=true", "--set", "variables.kueue_installed=true"},
		{"--set", "variables.run_ai_enable=true", "--set", "global._hopsworks.kueue.enabled=true"},
	} {
		_, stderr, err := helm(t, append([]string{"template", "x", "chart"}, flags...)...)
		require.Error(t, err, flags)
		assert.Contains(t, stderr, "Kueue and Run:ai are mutually exclusive")
	}
	_, stderr, err := helm(t, "template", "x", "chart", "--set", "variables.kueue_installed=true")
	assert.NoError(t, err, "Kueue alone renders: %s", stderr)
}

func TestSchemaRefusesWrongTypes(t *testing.T) {
	for flag, want := range map[string]string{
		"variables.run_ai_project_gpu_quota=two":     "run_ai_project_gpu_quota",
		"variables.run_ai_enable=maybe":              "run_ai_enable",
		"variables.run_ai_reconcile_interval_s=-5":   "run_ai_reconcile_interval_s",
		"variables.run_ai_default_department=Sales!": "run_ai_default_department",
		"variables.run_ai_url=runai:8080":            "run_ai_url",
	} {
		_, stderr, err := helm(t, "template", "x", "chart", "--set", flag)
		require.Error(t, err, flag)
		assert.Contains(t, stderr, want, flag)
	}
}

func TestSecretMountedAsFileNeverEnv(t *testing.T) {
	out, _, err := helm(t, "template", "x", "chart", "--set", "variables.run_ai_enable=true", "--set", "variables.run_ai_client_id=hw")
	require.NoError(t, err)
	assert.Contains(t, out, "RUN_AI_CLIENT_SECRET_FILE, value: /etc/runai-webhook/secret/client-secret")
	assert.NotContains(t, out, "secretKeyRef", "the client secret is never an environment variable")
	assert.Contains(t, out, "secretName: runai-hopsworks")
}

func loadInstall(t *testing.T) []client.Object {
	t.Helper()
	data, err := os.ReadFile("install.yaml")
	require.NoError(t, err)
	objs, err := framework.DecodeObjects(data)
	require.NoError(t, err)
	return objs
}

func TestInstalledWebhookConfigurationsFollowThePolicy(t *testing.T) {
	errs := framework.CheckWebhookConfigurations(loadInstall(t), "hopsworks.ai/project", "runai/queue")
	assert.Empty(t, errs)
}

// The guard above must catch a configuration that loses its exclusions or
// its policy: each case breaks the loaded objects one way.
func TestPolicyGuardCatchesBrokenConfigurations(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration)
		want   string
	}{
		{"bind loses its namespace exclusions", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			sel := m.Webhooks[0].NamespaceSelector
			var kept []metav1.LabelSelectorRequirement
			for _, r := range sel.MatchExpressions {
				if r.Key != "kubernetes.io/metadata.name" {
					kept = append(kept, r)
				}
			}
			sel.MatchExpressions = kept
		}, "namespace kube-system is not excluded"},
		{"guard stops excluding its own namespace", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			for i, r := range v.Webhooks[0].NamespaceSelector.MatchExpressions {
				if r.Key == "kubernetes.io/metadata.name" {
					v.Webhooks[0].NamespaceSelector.MatchExpressions[i].Values = []string{"kube-system", "kube-node-lease"}
				}
			}
		}, "namespace runai-webhook is not excluded"},
		{"guard fails open", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			ignore := admissionregistrationv1.Ignore
			v.Webhooks[0].FailurePolicy = &ignore
		}, "failurePolicy Ignore, want Fail"},
		{"bind without a selector", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].NamespaceSelector = nil
		}, "no namespaceSelector"},
		{"namespaces webhook dropped", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks = v.Webhooks[:1]
		}, "namespaces.runai-webhook.hopsworks.ai: missing"},
		{"bind has side effects on dry run", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			se := admissionregistrationv1.SideEffectClassSome
			m.Webhooks[0].SideEffects = &se
		}, "sideEffects Some, want NoneOnDryRun"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := loadInstall(t)
			var m *admissionregistrationv1.MutatingWebhookConfiguration
			var v *admissionregistrationv1.ValidatingWebhookConfiguration
			for _, o := range objs {
				switch w := o.(type) {
				case *admissionregistrationv1.MutatingWebhookConfiguration:
					m = w
				case *admissionregistrationv1.ValidatingWebhookConfiguration:
					v = w
				}
			}
			require.NotNil(t, m)
			require.NotNil(t, v)
			tt.break_(m, v)
			errs := framework.CheckWebhookConfigurations(objs, "hopsworks.ai/project", "runai/queue")
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			assert.Contains(t, strings.Join(msgs, "\n"), tt.want)
		})
	}
}

// certManager.enabled=false: the webhook manages its certificates. The chart
// passes the rotator's flags, creates the empty Secret it may only update
// (kept on uninstall), grants exactly that, mounts only the serving pair,
// and leaves cert-manager out.
func TestBuiltInCertificatesWithoutCertManager(t *testing.T) {
	out, stderr, err := helm(t, "template", "rel", "chart", "--namespace", "ns", "--set", "certManager.enabled=false")
	require.NoError(t, err, stderr)
	for _, arg := range []string{"--cert-rotation=true", "--cert-secret=rel-runai-webhook-tls", "--webhook-config-name=rel-runai-webhook",
		"--service-name=rel-runai-webhook", "--service-namespace=ns", "--cert-dir=/etc/runai-webhook/tls"} {
		assert.Contains(t, out, "- "+arg+"\n", arg)
	}
	assert.NotContains(t, out, "cert-manager.io")
	assert.Contains(t, out, "{key: tls.crt, path: tls.crt}")
	assert.NotContains(t, out, "ca.key", "the CA's key is never mounted")
	objs, err := framework.DecodeObjects([]byte(out))
	require.NoError(t, err)
	var secrets []*corev1.Secret
	var role *rbacv1.Role
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Secret:
			secrets = append(secrets, v)
		case *rbacv1.Role:
			role = v
		}
	}
	require.Len(t, secrets, 1)
	assert.Equal(t, "rel-runai-webhook-tls", secrets[0].Name)
	assert.Equal(t, "ns", secrets[0].Namespace)
	assert.Empty(t, secrets[0].Data, "the rotator fills it")
	assert.Equal(t, "keep", secrets[0].Annotations["helm.sh/resource-policy"])
	require.NotNil(t, role)
	var named []string
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") {
			assert.NotContains(t, r.Verbs, "create", "Secrets are never created by the webhook")
			named = append(named, r.ResourceNames...)
		}
	}
	assert.Equal(t, []string{"rel-runai-webhook-tls"}, named)

	// The default install has none of it.
	def, _, err := helm(t, "template", "rel", "chart", "--namespace", "ns")
	require.NoError(t, err)
	assert.NotContains(t, def, "--cert-rotation")
	assert.NotContains(t, def, "resource-policy")
}
