package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// benchResult is one benchmark's samples (one per -count).
type benchResult struct {
	ns, bytes, allocs []float64
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(v []float64) string {
	if len(v) < 2 {
		return ""
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf(" (min %.0f, max %.0f over %d runs)", s[0], s[len(s)-1], len(s))
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads `go test -bench -benchmem` output.
func parseBench(out []byte) map[string]*benchResult {
	res := map[string]*benchResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		name := strings.TrimPrefix(m[1], "Benchmark")
		r := res[name]
		if r == nil {
			r = &benchResult{}
			res[name] = r
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.ns = append(r.ns, v)
			case "B/op":
				r.bytes = append(r.bytes, v)
			case "allocs/op":
				r.allocs = append(r.allocs, v)
			}
		}
	}
	return res
}

// microBenchmarks runs pkg/mutate's benchmarks as a subprocess and compares
// each of our paths with its baseline (the same decision served through
// controller-runtime's generic decode, typed pod and marshal-and-diff patch).
func microBenchmarks(ctx context.Context, root string, sz sizes) *section {
	s := &section{Title: "1. Handler micro-benchmarks: our hot path vs controller-runtime's generic path"}
	args := []string{"test", "-run", "^$", "-bench", "Inject|Guard|Baseline", "-benchmem", "-count", strconv.Itoa(sz.BenchCount)}
	if sz.BenchTime != "" {
		args = append(args, "-benchtime", sz.BenchTime)
	}
	args = append(args, "./pkg/mutate/")
	cmdline := "go " + strings.Join(quoteArgs(args), " ")
	s.how("`%s` (subprocess; the median of the %d runs of each benchmark is compared)", cmdline, sz.BenchCount)
	s.how("baseline = the same decisions served the generic way: AdmissionReview decoded with the scheme's universal deserializer, the pod decoded into a typed corev1.Pod, the answer built with admission.PatchResponseFromRaw (marshal and diff); `TestBaselineMatchesOurs` proves both paths answer the same")
	progress("part 1: %s", cmdline)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	progress("part 1: go test took %s", time.Since(start).Round(time.Second))
	if err != nil {
		s.Err = fmt.Errorf("%s: %v\n%s", cmdline, err, tail(out, 30))
		return s
	}
	res := parseBench(out)
	if len(res) == 0 {
		s.Err = fmt.Errorf("%s printed no benchmark lines (does pkg/mutate have BenchmarkInject etc.?)\n%s", cmdline, tail(out, 30))
		return s
	}
	pairs := []struct {
		label, ours, base string
		target            bool
	}{
		{"inject", "Inject", "BaselineInject", true},
		{"guard (GPU job, no quota lookup)", "Guard", "BaselineGuard", true},
		{"inject + guard (GPU notebook, quota from cache)", "InjectGuard", "BaselineInjectGuard", true},
		{"guard with quota (GPU notebook)", "GuardQuota", "BaselineGuardQuota", false},
	}
	for _, p := range pairs {
		o, b := res[p.ours], res[p.base]
		if o == nil || b == nil {
			if p.target {
				s.add(p.label, fmt.Sprintf("Benchmark%s or Benchmark%s missing", p.ours, p.base), "present", "FAIL")
			}
			continue
		}
		nsR := ratio(median(o.ns), median(b.ns))
		alR := ratio(median(o.allocs), median(b.allocs))
		target, verdictNS, verdictAl := "≤ 0.33x", check(nsR <= 0.33), check(alR <= 0.33)
		if !p.target {
			target, verdictNS, verdictAl = "(extra, no target)", "", ""
		}
		s.add(p.label+": ns/op ours/baseline",
			fmt.Sprintf("%.2fx (%.0f vs %.0f ns/op)", nsR, median(o.ns), median(b.ns)), target, verdictNS)
		s.add(p.label+": allocs/op ours/baseline",
			fmt.Sprintf("%.2fx (%.0f vs %.0f allocs/op; %.0f vs %.0f B/op)", alR, median(o.allocs), median(b.allocs), median(o.bytes), median(b.bytes)), target, verdictAl)
	}
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	var tbl strings.Builder
	tbl.WriteString("| benchmark | ns/op (median) | B/op | allocs/op |\n|---|---|---|---|\n")
	for _, n := range names {
		r := res[n]
		fmt.Fprintf(&tbl, "| %s | %.0f%s | %.0f | %.0f |\n", n, median(r.ns), spread(r.ns), median(r.bytes), median(r.allocs))
	}
	s.Notes = append(s.Notes, tbl.String())
	return s
}

// hotPathGuard runs the regression guard (a cheap, non-timed test).
func hotPathGuard(ctx context.Context, root string) *section {
	s := &section{Title: "6. Regression guard: TestHotPathBudget"}
	args := []string{"test", "-count=1", "-run", "^TestHotPathBudget$", "-v", "./pkg/mutate/"}
	cmdline := "go " + strings.Join(quoteArgs(args), " ")
	s.how("`%s`: fails when serving inject or guard for a pod in a bound namespace makes any Binder or Run:ai call on the warm path, or allocates more than a fixed budget (testing.AllocsPerRun; no timing)", cmdline)
	progress("part 6: %s", cmdline)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if !bytes.Contains(out, []byte("TestHotPathBudget")) {
		s.Err = fmt.Errorf("%s: TestHotPathBudget did not run (%v)\n%s", cmdline, err, tail(out, 20))
		return s
	}
	s.add("TestHotPathBudget", map[bool]string{true: "passes", false: "fails"}[err == nil], "passes", check(err == nil))
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "allocs/op:") || strings.Contains(l, "Error") {
			s.note("`%s`", strings.TrimSpace(l))
		}
	}
	return s
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " |^$*") {
			out[i] = "'" + a + "'"
		} else {
			out[i] = a
		}
	}
	return out
}

func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
