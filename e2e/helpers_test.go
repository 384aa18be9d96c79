package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hopsworks/runai-webhook/e2e/framework"
)

const (
	projectLabel = "hopsworks.ai/project"
	deptLabel    = "hopsworks.ai/department"
	queueLabel   = "runai/queue"
	idLabel      = "hopsworks.ai/runai-project-id"
	typeLabel    = "hopsworks.ai/workload-type"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// namespaceYAML is a Hopsworks project namespace.
func namespaceYAML(name, dept string) string {
	labels := fmt.Sprintf("    %s: %q\n", projectLabel, name)
	if dept != "" {
		labels += fmt.Sprintf("    %s: %q\n", deptLabel, dept)
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n%s", name, labels)
}

// podYAML is a pod with gpus whole GPUs (0 = none) of workload type typ.
func podYAML(ns, name, typ string, gpus int, extraLabels map[string]string, scheduler string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n  labels:\n    app: e2e\n", name, ns)
	if typ != "" {
		fmt.Fprintf(&b, "    %s: %s\n", typeLabel, typ)
	}
	for k, v := range extraLabels {
		fmt.Fprintf(&b, "    %s: %q\n", k, v)
	}
	b.WriteString("spec:\n")
	if scheduler != "" {
		fmt.Fprintf(&b, "  schedulerName: %s\n", scheduler)
	}
	b.WriteString("  containers:\n  - name: main\n    image: registry.invalid/notebook:1\n")
	if gpus > 0 {
		fmt.Fprintf(&b, "    resources:\n      limits:\n        nvidia.com/gpu: %d\n", gpus)
	}
	return b.String()
}

func kubectlOK(t *testing.T, stdin string, args ...string) (string, string) {
	t.Helper()
	out, errOut, err := env.Kubectl(ctxT(t, 60*time.Second), stdin, args...)
	require.NoError(t, err, "kubectl %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	return out, errOut
}

func kubectlFails(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := env.Kubectl(ctxT(t, 60*time.Second), stdin, args...)
	require.Error(t, err, "kubectl %s should fail\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	return errOut
}

// waitBound waits for the controller (or the first pod) to bind ns.
func waitBound(t *testing.T, ns string, within time.Duration) *corev1.Namespace {
	t.Helper()
	var got corev1.Namespace
	require.Eventually(t, func() bool {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: ns}, &got); err != nil {
			return false
		}
		return got.Labels[queueLabel] != ""
	}, within, 100*time.Millisecond, "namespace %s not bound within %s", ns, within)
	return &got
}

func getNamespace(t *testing.T, name string) *corev1.Namespace {
	t.Helper()
	var ns corev1.Namespace
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &ns))
	return &ns
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p))
	return &p
}

// deleteNamespaceAtEnd removes a test namespace when the test ends.
func deleteNamespaceAtEnd(t *testing.T, name string) {
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// admissionCount sums runai_webhook_admission_decisions_total over outcomes
// for one webhook (all webhooks when webhook is "").
func admissionCount(t *testing.T, webhook string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != "runai_webhook_admission_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if webhook == "" || label(m, "webhook") == webhook {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// simWrites counts the Run:ai writes a test can cause: every create under
// /api/v1/org-unit/, and deletes of the given projects. Deletes of other
// projects are left out: namespaces of earlier tests may still be
// finalizing, and their projects' deletion is not this test's doing.
func simWrites(projectIDs ...string) int {
	n := 0
	for _, c := range env.Sim.Calls() {
		switch {
		case c.Method == "POST" && strings.HasPrefix(c.Path, "/api/v1/org-unit/"):
			n++
		case c.Method == "PUT" || c.Method == "PATCH":
			n++
		case c.Method == "DELETE":
			for _, id := range projectIDs {
				if c.Path == "/api/v1/org-unit/projects/"+id {
					n++
				}
			}
		}
	}
	return n
}

// refusedByUs reports whether an API error message is a refusal by one of
// our webhooks ("admission webhook ... denied the request") or by our
// ValidatingAdmissionPolicy, which carries the label rules in the API
// server when the chart renders the admission policies.
func refusedByUs(msg string) bool {
	return strings.Contains(msg, "denied the request") ||
		strings.Contains(msg, "ValidatingAdmissionPolicy '"+framework.ReleaseName+"-pods'")
}
