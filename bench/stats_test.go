package main

import (
	"math"
	"testing"
	"time"
)

func TestParsePromAndQuantile(t *testing.T) {
	text := []byte(`# HELP x help
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="inject.runai-webhook.hopsworks.ai",operation="CREATE",rejected="false",type="admit",le="0.005"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="inject.runai-webhook.hopsworks.ai",operation="CREATE",rejected="false",type="admit",le="0.025"} 90
apiserver_admission_webhook_admission_duration_seconds_bucket{name="inject.runai-webhook.hopsworks.ai",operation="CREATE",rejected="false",type="admit",le="0.1"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="inject.runai-webhook.hopsworks.ai",operation="CREATE",rejected="false",type="admit",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_sum{name="inject.runai-webhook.hopsworks.ai",operation="CREATE",rejected="false",type="admit"} 1.5
apiserver_admission_webhook_admission_duration_seconds_count{name="inject.runai-webhook.hopsworks.ai",operation="CREATE",rejected="false",type="admit"} 100
apiserver_request_total{code="201",verb="PATCH",resource="namespaces",path="a\"b"} 7
`)
	samples := parseProm(text)
	if got := promSum(samples, "apiserver_request_total", func(l map[string]string) bool { return l["verb"] == "PATCH" }); got != 7 {
		t.Fatalf("promSum = %v, want 7", got)
	}
	if samples[len(samples)-1].labels["path"] != `a"b` {
		t.Fatalf("escaped label value: %q", samples[len(samples)-1].labels["path"])
	}
	h := promHists(samples, "apiserver_admission_webhook_admission_duration_seconds", "name", nil)["inject.runai-webhook.hopsworks.ai"]
	if h.count != 100 || len(h.bounds) != 3 {
		t.Fatalf("hist = %+v", h)
	}
	// p50: rank 50 in (0.005, 0.025], 40 of 80 in: 0.005 + 0.02*0.5.
	if v, over := h.quantile(0.5); math.Abs(v-0.015) > 1e-9 || over {
		t.Fatalf("p50 = %v (over %v), want 0.015", v, over)
	}
	if v, _ := h.quantile(0.99); math.Abs(v-(0.025+0.075*0.9)) > 1e-9 {
		t.Fatalf("p99 = %v", v)
	}
	d := h.sub(hist{bounds: h.bounds, counts: []float64{10, 10, 10}, count: 10})
	if d.count != 90 || d.counts[0] != 0 {
		t.Fatalf("sub = %+v", d)
	}
}

func TestLatencies(t *testing.T) {
	var l latencies
	for i := 100; i >= 1; i-- {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	if l.pct(0.5) != 50*time.Millisecond || l.pct(0.99) != 99*time.Millisecond || l.max() != 100*time.Millisecond {
		t.Fatalf("p50 %v p99 %v max %v", l.pct(0.5), l.pct(0.99), l.max())
	}
}

func TestParseBench(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkInject-2           	   12345	     95829 ns/op	   12116 B/op	      74 allocs/op
BenchmarkBaselineInject-2   	    1000	   1019688 ns/op	  182154 B/op	    3501 allocs/op
BenchmarkInject-2           	   12345	     90000 ns/op	   12116 B/op	      74 allocs/op
PASS
`)
	r := parseBench(out)
	if len(r["Inject"].ns) != 2 || median(r["Inject"].ns) != 92914.5 || r["BaselineInject"].allocs[0] != 3501 {
		t.Fatalf("%+v %+v", r["Inject"], r["BaselineInject"])
	}
}
