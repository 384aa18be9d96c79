package e2e

import (
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hopsworks/runai-webhook/pkg/gpuview"
)

// The webhook runs in this process, so controller-runtime's registry holds
// exactly what its /metrics would serve. The test makes its own small
// scenario first (go test runs files in name order; it must not depend on
// the tests before it): a namespace bound by the controller, a pod admitted,
// a pod refused by the quota check, a GPU view read.
func TestMetricsFamiliesAfterAScenario(t *testing.T) {
	skipWithoutSimulator(t)
	ns := "e2e-metrics"
	deleteNamespaceAtEnd(t, ns)
	kubectlOK(t, namespaceYAML(ns, "research"), "apply", "-f", "-")
	waitBound(t, ns, 30*time.Second)
	kubectlOK(t, podYAML(ns, "job", "job", 0, nil, ""), "apply", "-f", "-")
	stderr := kubectlFails(t, podYAML(ns, "too-big", "notebook", 3, nil, ""), "apply", "-f", "-")
	assert.Contains(t, stderr, "GPUs left")
	waitAggregated(t)
	viewer := saSubject(ns, "metrics-viewer")
	bindView(t, ns, viewer)
	token := serviceAccountToken(t, ns, viewer.Name)
	waitAllowed(t, viewer, ns, gpuview.ResourceGPUAvailability)
	code, body := viewGET(t, "GET", gpuview.NamespacePath(ns), token)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, gpuview.StatusOK, decodeJSON[gpuview.NamespaceView](t, body).Status)

	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	total := func(name string, match map[string]string) float64 {
		f, ok := byName[name]
		if !assert.True(t, ok, "metric family %s is exported", name) {
			return 0
		}
		sum := 0.0
	next:
		for _, m := range f.GetMetric() {
			for k, v := range match {
				if label(m, k) != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}

	// Exercised by the scenario: non-zero.
	assert.Positive(t, total("runai_webhook_admission_decisions_total", nil), "admission decisions")
	assert.Positive(t, total("runai_webhook_admission_decisions_total", map[string]string{"outcome": "refused"}), "a refused decision")
	assert.Positive(t, total("runai_webhook_admission_refusals_total", nil), "refusals by reason")
	assert.Positive(t, total("runai_webhook_admission_duration_seconds", nil), "admission latency observations")
	assert.Positive(t, total("runai_webhook_runai_api_calls_total", nil), "Run:ai API calls")
	assert.Positive(t, total("runai_webhook_runai_api_duration_seconds", nil), "Run:ai API latency observations")
	assert.Positive(t, total("runai_webhook_runai_token_refreshes_total", map[string]string{"result": "ok"}), "Run:ai token fetches")
	assert.Positive(t, total("runai_webhook_bindings_total", map[string]string{"outcome": "created"}), "bindings created")
	assert.Equal(t, 2.0, total("runai_webhook_project_gpus", map[string]string{"project": ns, "kind": "deserved"}), "the GPU view recorded the project's deserved GPUs")
	assert.Equal(t, 0.0, total("runai_webhook_project_gpus", map[string]string{"project": ns, "kind": "allocated"}))
	assert.Positive(t, total("runai_webhook_reconcile_pass_duration_seconds", nil), "the pass ran at start-up")

	// Not exercised here, but exported from the start (plain gauges and counters).
	for _, name := range []string{"runai_webhook_department_drift_namespaces", "runai_webhook_unbound_namespaces", "runai_webhook_reconcile_pass_failures_total"} {
		assert.Contains(t, byName, name)
	}
	// runai_webhook_runai_admission_available is a labelled gauge with one
	// series per Run:ai admission Deployment watched (pkg/runaiwatch); the
	// local test bed runs no Run:ai, so it is not asserted here.
}
