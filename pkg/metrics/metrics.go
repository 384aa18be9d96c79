// Package metrics registers the webhook's Prometheus metrics on
// controller-runtime's registry (served on the manager's /metrics) and
// implements the observer interfaces of the other packages.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/bind"
)

var (
	admissionDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runai_webhook_admission_decisions_total", Help: "Admission decisions by webhook and outcome (allowed, patched, refused).",
	}, []string{"webhook", "outcome"})
	admissionRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runai_webhook_admission_refusals_total", Help: "Admission refusals by webhook and reason.",
	}, []string{"webhook", "reason"})
	admissionLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "runai_webhook_admission_duration_seconds", Help: "Time to decide one review, by webhook.",
		// Finer between 50 and 250 ms, where a first-pod bind (two Run:ai
		// round trips and a namespace write) lands.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .075, .1, .15, .2, .25, .5, 1, 2.5, 5, 10},
	}, []string{"webhook"})
	runaiCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runai_webhook_runai_api_calls_total", Help: "Run:ai API calls by operation and HTTP status (0 = no answer).",
	}, []string{"operation", "status"})
	runaiLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "runai_webhook_runai_api_duration_seconds", Help: "Run:ai API call latency by operation.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"operation"})
	tokenRefreshes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runai_webhook_runai_token_refreshes_total", Help: "Run:ai token fetches by endpoint and result.",
	}, []string{"endpoint", "result"})
	bindOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runai_webhook_bindings_total", Help: "Binding outcomes: created, adopted, failed, moved, deleted.",
	}, []string{"outcome"})
	driftCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "runai_webhook_department_drift_namespaces", Help: "Namespaces whose Run:ai project is in another department than their mapping (last pass).",
	})
	unboundCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "runai_webhook_unbound_namespaces", Help: "Managed namespaces still unbound after the last pass.",
	})
	passDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "runai_webhook_reconcile_pass_duration_seconds", Help: "Duration of the background pass.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	passFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "runai_webhook_reconcile_pass_failures_total", Help: "Background passes that failed.",
	})
	projectGPUs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "runai_webhook_project_gpus", Help: "Deserved and allocated GPUs of a Run:ai project (default node pool), as last read.",
	}, []string{"project", "kind"})
	runaiAdmissionAvailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "runai_webhook_runai_admission_available", Help: "1 when Run:ai's own admission Deployment has available replicas.",
	}, []string{"deployment"})
)

func init() {
	crmetrics.Registry.MustRegister(admissionDecisions, admissionRefusals, admissionLatency, runaiCalls, runaiLatency,
		tokenRefreshes, bindOutcomes, driftCount, unboundCount, passDuration, passFailures, projectGPUs, runaiAdmissionAvailable)
}

// Recorder implements the observers of pkg/admission, pkg/runai and pkg/bind.
type Recorder struct{}

// ObserveReview implements admission.Observer.
func (Recorder) ObserveReview(webhook string, resp admission.Response, took time.Duration) {
	outcome := "allowed"
	switch {
	case !resp.Allowed:
		outcome = "refused"
		admissionRefusals.WithLabelValues(webhook, resp.Reason).Inc()
	case len(resp.Patch) > 0:
		outcome = "patched"
	}
	admissionDecisions.WithLabelValues(webhook, outcome).Inc()
	admissionLatency.WithLabelValues(webhook).Observe(took.Seconds())
}

// ObserveCall implements runai.Observer.
func (Recorder) ObserveCall(op string, status int, d time.Duration) {
	runaiCalls.WithLabelValues(op, strconv.Itoa(status)).Inc()
	runaiLatency.WithLabelValues(op).Observe(d.Seconds())
}

// ObserveTokenRefresh implements runai.Observer.
func (Recorder) ObserveTokenRefresh(endpoint string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	tokenRefreshes.WithLabelValues(endpoint, result).Inc()
}

// ObserveBind implements bind.Observer.
func (Recorder) ObserveBind(outcome string) { bindOutcomes.WithLabelValues(outcome).Inc() }

// ObservePass implements bind.PassObserver.
func (Recorder) ObservePass(r bind.PassResult, took time.Duration, err error) {
	passDuration.Observe(took.Seconds())
	if err != nil {
		passFailures.Inc()
	}
	driftCount.Set(float64(r.Drift))
	unboundCount.Set(float64(r.Unbound))
}

// SetProjectGPUs records a project's numbers as read by the GPU view.
func SetProjectGPUs(project string, deserved, allocated float64) {
	projectGPUs.WithLabelValues(project, "deserved").Set(deserved)
	projectGPUs.WithLabelValues(project, "allocated").Set(allocated)
}

// SetRunAIAdmission records the availability of one of Run:ai's admission Deployments.
func SetRunAIAdmission(deployment string, available bool) {
	v := 0.0
	if available {
		v = 1
	}
	runaiAdmissionAvailable.WithLabelValues(deployment).Set(v)
}
