package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// latencies summarises client-side call latencies.
type latencies []time.Duration

func (l latencies) sorted() latencies {
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

// pct is the nearest-rank percentile (q in 0..1) of sorted latencies.
func (l latencies) pct(q float64) time.Duration {
	s := l.sorted()
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[min(i, len(s)-1)]
}

func (l latencies) max() time.Duration { return l.pct(1) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func secs(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }

func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

// ---- histograms (Prometheus text format and controller-runtime's registry) ----

// hist is a cumulative histogram: counts[i] observations <= bounds[i].
type hist struct {
	bounds []float64
	counts []float64
	count  float64
	sum    float64
}

func (h hist) empty() bool { return h.count == 0 }

// add merges o into h (same buckets; a zero h takes o's).
func (h hist) add(o hist) hist {
	if len(h.bounds) == 0 {
		return hist{bounds: append([]float64(nil), o.bounds...), counts: append([]float64(nil), o.counts...), count: o.count, sum: o.sum}
	}
	out := hist{bounds: h.bounds, counts: append([]float64(nil), h.counts...), count: h.count + o.count, sum: h.sum + o.sum}
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] += o.counts[i]
		}
	}
	return out
}

// sub is h minus an earlier snapshot o of the same histogram.
func (h hist) sub(o hist) hist {
	out := hist{bounds: h.bounds, counts: append([]float64(nil), h.counts...), count: h.count - o.count, sum: h.sum - o.sum}
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linear interpolation inside the bucket. Observations above the last finite
// bound report that bound (the estimate is then a lower bound, flagged by the
// second result).
func (h hist) quantile(q float64) (float64, bool) {
	if h.count == 0 || len(h.bounds) == 0 {
		return 0, false
	}
	rank := q * h.count
	lower, prev := 0.0, 0.0
	for i, b := range h.bounds {
		c := h.counts[i]
		if c >= rank {
			if c == prev {
				return b, false
			}
			return lower + (b-lower)*(rank-prev)/(c-prev), false
		}
		lower, prev = b, c
	}
	return h.bounds[len(h.bounds)-1], true
}

// bucketOf names the bucket the q-quantile falls in, e.g. "(0.025, 0.1] s".
func (h hist) bucketOf(q float64) string {
	if h.count == 0 {
		return "no observations"
	}
	rank := q * h.count
	lower := 0.0
	for i, b := range h.bounds {
		if h.counts[i] >= rank {
			return fmt.Sprintf("(%g, %g] s", lower, b)
		}
		lower = b
	}
	return fmt.Sprintf("> %g s", lower)
}

func (h hist) describe(q float64) string {
	if h.count == 0 {
		return "no observations"
	}
	v, over := h.quantile(q)
	s := fmt.Sprintf("%.1f ms", v*1000)
	if over {
		s = "> " + s
	}
	return fmt.Sprintf("%s (bucket %s, %d observations, mean %.1f ms)", s, h.bucketOf(q), int64(h.count), 1000*h.sum/h.count)
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm parses the Prometheus text exposition format (what
// kube-apiserver's /metrics serves); comments and malformed lines are skipped.
func parseProm(data []byte) []sample {
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i < 0 {
			continue
		} else {
			s.name = line[:i]
			rest = line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			rest = rest[1:]
			for {
				rest = strings.TrimLeft(rest, ", ")
				if strings.HasPrefix(rest, "}") {
					rest = rest[1:]
					break
				}
				eq := strings.IndexByte(rest, '=')
				if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
					rest = ""
					break
				}
				key := rest[:eq]
				rest = rest[eq+2:]
				var val strings.Builder
				j := 0
				for ; j < len(rest); j++ {
					c := rest[j]
					if c == '\\' && j+1 < len(rest) {
						j++
						switch rest[j] {
						case 'n':
							val.WriteByte('\n')
						default:
							val.WriteByte(rest[j])
						}
						continue
					}
					if c == '"' {
						break
					}
					val.WriteByte(c)
				}
				s.labels[key] = val.String()
				if j >= len(rest) {
					rest = ""
					break
				}
				rest = rest[j+1:]
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// promHists groups the histogram named base by the value of label groupBy
// (all series summed when groupBy is ""), keeping series accepted by keep.
func promHists(samples []sample, base, groupBy string, keep func(map[string]string) bool) map[string]hist {
	type acc struct {
		buckets    map[float64]float64
		count, sum float64
	}
	accs := map[string]*acc{}
	get := func(l map[string]string) *acc {
		k := ""
		if groupBy != "" {
			k = l[groupBy]
		}
		a := accs[k]
		if a == nil {
			a = &acc{buckets: map[float64]float64{}}
			accs[k] = a
		}
		return a
	}
	for _, s := range samples {
		if keep != nil && !keep(s.labels) {
			continue
		}
		switch s.name {
		case base + "_bucket":
			le := s.labels["le"]
			if le == "+Inf" {
				continue
			}
			b, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			get(s.labels).buckets[b] += s.value
		case base + "_count":
			get(s.labels).count += s.value
		case base + "_sum":
			get(s.labels).sum += s.value
		}
	}
	out := map[string]hist{}
	for k, a := range accs {
		var h hist
		for b := range a.buckets {
			h.bounds = append(h.bounds, b)
		}
		sort.Float64s(h.bounds)
		for _, b := range h.bounds {
			h.counts = append(h.counts, a.buckets[b])
		}
		h.count, h.sum = a.count, a.sum
		out[k] = h
	}
	return out
}

// promSum sums the counter named name over the series keep accepts.
func promSum(samples []sample, name string, keep func(map[string]string) bool) float64 {
	t := 0.0
	for _, s := range samples {
		if s.name == name && (keep == nil || keep(s.labels)) {
			t += s.value
		}
	}
	return t
}

// dtoHists reads a histogram family from a gathered registry, by the value
// of label groupBy.
func dtoHists(families []*dto.MetricFamily, name, groupBy string) map[string]hist {
	out := map[string]hist{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			k := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == groupBy {
					k = l.GetValue()
				}
			}
			hh := m.GetHistogram()
			if hh == nil {
				continue
			}
			var h hist
			for _, b := range hh.GetBucket() {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue
				}
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.counts = append(h.counts, float64(b.GetCumulativeCount()))
			}
			h.count, h.sum = float64(hh.GetSampleCount()), hh.GetSampleSum()
			out[k] = out[k].add(h)
		}
	}
	return out
}

// dtoCounter sums a counter family's series whose label has value (all
// series when label is "").
func dtoCounter(families []*dto.MetricFamily, name, label, value string) float64 {
	t := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			ok := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					ok = true
				}
			}
			if ok && m.GetCounter() != nil {
				t += m.GetCounter().GetValue()
			}
		}
	}
	return t
}
