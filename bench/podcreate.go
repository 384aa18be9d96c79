package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// createRun is one timed run of concurrent pod creation.
type createRun struct {
	with      bool
	lat       latencies
	errs      int
	firstErr  error
	wall      time.Duration
	webhooks  map[string]hist // apiserver_admission_webhook_admission_duration_seconds by webhook name
	server    hist            // apiserver_request_duration_seconds, POST pods
	admission map[string]hist // apiserver_admission_step_admission_duration_seconds by type
	ours      map[string]hist // runai_webhook_admission_duration_seconds by webhook (in process)
	cpu       map[string]time.Duration
	// machine: busy and total CPU ticks of the whole machine during the run
	machineBusy, machineTotal int64
}

// createPods creates n pods with `creators` concurrent callers spread over
// namespaces, timing each create call.
func (b *bed) createPods(ctx context.Context, namespaces []string, prefix string, n, creators int) (latencies, int, error, time.Duration) {
	var next atomic.Int64
	var mu sync.Mutex
	lat := make(latencies, 0, n)
	errs := 0
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < creators; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				ns := namespaces[i%len(namespaces)]
				pod := jobPod(ns, fmt.Sprintf("%s-%05d", prefix, i), nil)
				t := time.Now()
				_, err := b.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, errs, firstErr, time.Since(start)
}

// podCreation is part 2: pods through the real API server with every
// webhook installed vs none, alternating.
func (b *bed) podCreation(ctx context.Context, sz sizes) *section {
	s := &section{Title: fmt.Sprintf("2. Pod creation through kube-apiserver: all webhooks vs none, %d creators", sz.Creators)}
	s.how("%d bound Hopsworks namespaces (bound by the controller against the simulator); %d concurrent creators create %d simple non-GPU pods (workload type job) per run, spread over them, through the admin client (protobuf, no client-side throttling)", sz.BoundNamespaces, sz.Creators, sz.PodsPerRun)
	s.how("runs alternate: with (the chart's Mutating and ValidatingWebhookConfiguration, inject and guard called for every pod) and none (both configurations deleted), %d runs each; before each run the API server's view is confirmed by dry-run pods (queue label injected, foreign queue refused, or neither) and %d warm-up pods are created and not counted; all pods are deleted between runs (DeleteCollection)", sz.RunsPerMode, sz.Creators)
	if sz.LowCreators > 0 {
		s.how("the same alternation is repeated with %d creators and %d pods per run, %d runs each, to show what the webhooks add when few calls are in flight (informational)", sz.LowCreators, sz.LowPodsPerRun, sz.LowRunsPerMode)
	}
	s.how("latency = client-side time of each create call; the API server's own histograms (apiserver_admission_webhook_admission_duration_seconds per webhook, apiserver_request_duration_seconds for POST pods) are scraped from its /metrics before and after each run and the difference is used; CPU time of kube-apiserver, etcd and this process from /proc")
	namespaces := make([]string, sz.BoundNamespaces)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("bench-bound-%02d", i)
		if _, err := b.cs.CoreV1().Namespaces().Create(ctx, b.managedNamespace(namespaces[i]), metav1.CreateOptions{}); err != nil {
			s.Err = fmt.Errorf("creating namespace %s: %w", namespaces[i], err)
			return s
		}
	}
	if err := b.waitBound(ctx, namespaces, 60*time.Second); err != nil {
		s.Err = err
		return s
	}
	progress("part 2: %d namespaces bound", len(namespaces))

	runs, err := b.createSeries(ctx, namespaces, sz.Creators, sz.PodsPerRun, sz.RunsPerMode, "run")
	if err != nil {
		s.Err = err
		return s
	}
	var low []*createRun
	if sz.LowCreators > 0 && ctx.Err() == nil {
		if low, err = b.createSeries(ctx, namespaces, sz.LowCreators, sz.LowPodsPerRun, sz.LowRunsPerMode, "low"); err != nil {
			s.Err = err
			return s
		}
	}
	// Leave the webhooks installed for the next part.
	if err := b.setWebhooks(ctx, true); err != nil {
		s.Err = err
		return s
	}
	if _, err := b.waitWebhooks(ctx, namespaces[0], true); err != nil {
		s.Err = err
		return s
	}
	b.reportCreation(s, runs, sz)
	if len(low) > 0 {
		b.reportLow(s, low, sz)
	}
	return s
}

// createSeries runs runsPerMode runs with webhooks and as many without,
// alternating, deleting the pods after each.
func (b *bed) createSeries(ctx context.Context, namespaces []string, creators, podsPerRun, runsPerMode int, prefix string) ([]*createRun, error) {
	var runs []*createRun
	for r := 0; r < 2*runsPerMode && ctx.Err() == nil; r++ {
		with := r%2 == 0
		label := map[bool]string{true: "with", false: "none"}[with]
		if err := b.setWebhooks(ctx, with); err != nil {
			return nil, err
		}
		took, err := b.waitWebhooks(ctx, namespaces[0], with)
		if err != nil {
			return nil, err
		}
		// Warm-up: connections to the webhook, caches.
		if _, errs, ferr, _ := b.createPods(ctx, namespaces, fmt.Sprintf("warm-%s-%d", prefix, r), creators, creators); errs > 0 {
			return nil, fmt.Errorf("warm-up of %s %d (%s): %d errors, first: %v", prefix, r+1, label, errs, ferr)
		}
		before, err := b.scrape(ctx)
		if err != nil {
			return nil, err
		}
		fam0, _ := crmetrics.Registry.Gather()
		cpu0 := cpuTimes()
		mb0, mt0 := machineCPU()
		lat, errs, ferr, wall := b.createPods(ctx, namespaces, fmt.Sprintf("%s-%d", prefix, r), podsPerRun, creators)
		mb1, mt1 := machineCPU()
		cpu1 := cpuTimes()
		fam1, _ := crmetrics.Registry.Gather()
		after, err := b.scrape(ctx)
		if err != nil {
			return nil, err
		}
		run := &createRun{with: with, lat: lat, errs: errs, firstErr: ferr, wall: wall, cpu: subCPU(cpu1, cpu0), machineBusy: mb1 - mb0, machineTotal: mt1 - mt0}
		run.webhooks = diffHists(promHists(after, "apiserver_admission_webhook_admission_duration_seconds", "name", nil),
			promHists(before, "apiserver_admission_webhook_admission_duration_seconds", "name", nil))
		postPods := func(l map[string]string) bool {
			return l["verb"] == "POST" && l["resource"] == "pods" && l["subresource"] == "" && l["dry_run"] == ""
		}
		run.server = promHists(after, "apiserver_request_duration_seconds", "", postPods)[""].sub(promHists(before, "apiserver_request_duration_seconds", "", postPods)[""])
		podCreate := func(l map[string]string) bool { return l["resource"] == "pods" && l["operation"] == "CREATE" }
		run.admission = diffHists(promHists(after, "apiserver_admission_step_admission_duration_seconds", "type", podCreate),
			promHists(before, "apiserver_admission_step_admission_duration_seconds", "type", podCreate))
		run.ours = diffHists(dtoHists(fam1, "runai_webhook_admission_duration_seconds", "webhook"), dtoHists(fam0, "runai_webhook_admission_duration_seconds", "webhook"))
		runs = append(runs, run)
		progress("part 2: %s %d/%d, %d creators (%s webhooks, applied after %s): %d pods in %s (%.0f pods/s), p50 %s, p99 %s, %d errors",
			prefix, r+1, 2*runsPerMode, creators, label, took.Round(time.Millisecond), len(lat), wall.Round(time.Millisecond), float64(len(lat))/wall.Seconds(), ms(lat.pct(0.5)), ms(lat.pct(0.99)), errs)
		if err := b.deletePods(ctx, namespaces); err != nil {
			return nil, err
		}
	}
	return runs, ctx.Err()
}

// reportLow reports the low-concurrency series: the webhooks' cost when
// the machine has spare CPU.
func (b *bed) reportLow(s *section, runs []*createRun, sz sizes) {
	var with, none latencies
	var errs int
	var wallW, wallN time.Duration
	var mbW, mtW, mbN, mtN int64
	for _, r := range runs {
		errs += r.errs
		if r.with {
			with, wallW, mbW, mtW = append(with, r.lat...), wallW+r.wall, mbW+r.machineBusy, mtW+r.machineTotal
		} else {
			none, wallN, mbN, mtN = append(none, r.lat...), wallN+r.wall, mbN+r.machineBusy, mtN+r.machineTotal
		}
	}
	if len(with) == 0 || len(none) == 0 {
		return
	}
	title := fmt.Sprintf("at %d creators (few calls in flight)", sz.LowCreators)
	s.info("p99 create latency, with / none, "+title, fmt.Sprintf("%.2fx (%s vs %s; +%s)", ratio(float64(with.pct(0.99)), float64(none.pct(0.99))), ms(with.pct(0.99)), ms(none.pct(0.99)), ms(with.pct(0.99)-none.pct(0.99))))
	s.info("p50 create latency, with / none, "+title, fmt.Sprintf("%.2fx (%s vs %s; +%s)", ratio(float64(with.pct(0.5)), float64(none.pct(0.5))), ms(with.pct(0.5)), ms(none.pct(0.5)), ms(with.pct(0.5)-none.pct(0.5))))
	s.info("throughput and machine CPU busy, with / none, "+title, fmt.Sprintf("%.0f vs %.0f pods/s; %.2f vs %.2f of %d cores busy; %d errors; %d pods timed per mode",
		float64(len(with))/wallW.Seconds(), float64(len(none))/wallN.Seconds(), float64(cpuCount())*ratio(float64(mbW), float64(mtW)), float64(cpuCount())*ratio(float64(mbN), float64(mtN)), cpuCount(), errs, len(with)))
}

func diffHists(after, before map[string]hist) map[string]hist {
	out := map[string]hist{}
	for k, h := range after {
		out[k] = h.sub(before[k])
	}
	return out
}

func (b *bed) reportCreation(s *section, runs []*createRun, sz sizes) {
	var with, none latencies
	var errsWith, errsNone int
	var wallWith, wallNone time.Duration
	var firstErr error
	hooks := map[string]hist{}
	ours := map[string]hist{}
	var serverWith, serverNone hist
	admWith, admNone := map[string]hist{}, map[string]hist{}
	cpuWith, cpuNone := map[string]time.Duration{}, map[string]time.Duration{}
	var p99With, p99None []string
	var mbW, mtW, mbN, mtN int64
	for _, r := range runs {
		if r.firstErr != nil && firstErr == nil {
			firstErr = r.firstErr
		}
		if r.with {
			with = append(with, r.lat...)
			errsWith += r.errs
			wallWith += r.wall
			p99With = append(p99With, ms(r.lat.pct(0.99)))
			for k, h := range r.webhooks {
				hooks[k] = hooks[k].add(h)
			}
			for k, h := range r.ours {
				ours[k] = ours[k].add(h)
			}
			serverWith = serverWith.add(r.server)
			for k, h := range r.admission {
				admWith[k] = admWith[k].add(h)
			}
			for k, v := range r.cpu {
				cpuWith[k] += v
			}
			mbW += r.machineBusy
			mtW += r.machineTotal
		} else {
			none = append(none, r.lat...)
			errsNone += r.errs
			wallNone += r.wall
			p99None = append(p99None, ms(r.lat.pct(0.99)))
			serverNone = serverNone.add(r.server)
			for k, h := range r.admission {
				admNone[k] = admNone[k].add(h)
			}
			for k, v := range r.cpu {
				cpuNone[k] += v
			}
			mbN += r.machineBusy
			mtN += r.machineTotal
		}
	}
	if len(with) == 0 || len(none) == 0 {
		s.Err = fmt.Errorf("no complete pair of runs")
		return
	}
	r99 := ratio(float64(with.pct(0.99)), float64(none.pct(0.99)))
	r50 := ratio(float64(with.pct(0.5)), float64(none.pct(0.5)))
	s.add(fmt.Sprintf("p99 create latency, with / none (%d creators)", sz.Creators),
		fmt.Sprintf("%.2fx (%s vs %s)", r99, ms(with.pct(0.99)), ms(none.pct(0.99))), "≤ 1.10x", check(r99 <= 1.10))
	s.add("errors (all runs, both modes)", fmt.Sprintf("%d with, %d none", errsWith, errsNone), "0", check(errsWith+errsNone == 0))
	s.info("p50 create latency, with / none", fmt.Sprintf("%.2fx (%s vs %s)", r50, ms(with.pct(0.5)), ms(none.pct(0.5))))
	s.info("p99 of each run, with", strings.Join(p99With, ", "))
	s.info("p99 of each run, none", strings.Join(p99None, ", "))
	tw, tn := float64(len(with))/wallWith.Seconds(), float64(len(none))/wallNone.Seconds()
	s.info("throughput, with / none", fmt.Sprintf("%.0f vs %.0f pods/s (%.2fx)", tw, tn, ratio(tw, tn)))
	s.info("pods timed per mode", fmt.Sprintf("%d with, %d none", len(with), len(none)))
	if firstErr != nil {
		s.note("First error: `%s`", oneLine(firstErr.Error()))
	}
	srv99w, _ := serverWith.quantile(0.99)
	srv99n, _ := serverNone.quantile(0.99)
	s.info("API server's own POST pods latency p99 (apiserver_request_duration_seconds), with / none",
		fmt.Sprintf("%.2fx (%s vs %s)", ratio(srv99w, srv99n), serverWith.describe(0.99), serverNone.describe(0.99)))
	names := make([]string, 0, len(hooks))
	for k := range hooks {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if hooks[k].empty() {
			continue
		}
		s.info("API server's p99 of webhook "+k+" (apiserver_admission_webhook_admission_duration_seconds, with runs)", hooks[k].describe(0.99))
	}
	for _, k := range []string{"admit", "validate"} {
		if h, ok := admWith[k]; ok && !h.empty() {
			s.info("API server's p99 of the "+k+" admission step, with / none", fmt.Sprintf("%s / %s", h.describe(0.99), admNone[k].describe(0.99)))
		}
	}
	for _, k := range []string{"inject", "guard"} {
		if h, ok := ours[k]; ok && !h.empty() {
			s.info("webhook's own decision time p99, "+k+" (runai_webhook_admission_duration_seconds, in process)", h.describe(0.99))
		}
	}
	// CPU per pod: where the time goes on a machine the creators saturate.
	keys := make([]string, 0, len(cpuWith))
	for k := range cpuWith {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var totW, totN time.Duration
	var parts []string
	for _, k := range keys {
		w := cpuWith[k] / time.Duration(len(with))
		n := cpuNone[k] / time.Duration(len(none))
		totW += cpuWith[k]
		totN += cpuNone[k]
		parts = append(parts, fmt.Sprintf("%s %.2f vs %.2f ms", k, float64(w)/1e6, float64(n)/1e6))
	}
	cw := float64(totW) / float64(len(with)) / 1e6
	cn := float64(totN) / float64(len(none)) / 1e6
	s.info("CPU time per pod, with / none", fmt.Sprintf("%.2fx (%.2f vs %.2f ms: %s)", ratio(cw, cn), cw, cn, strings.Join(parts, "; ")))

	// What dominates: the figures that explain the ratio.
	hookP99 := 0.0
	for _, k := range names {
		if v, _ := hooks[k].quantile(0.99); v > hookP99 {
			hookP99 = v
		}
	}
	busyW := float64(totW) / float64(wallWith)
	busyN := float64(totN) / float64(wallNone)
	meanW, meanN := mean(with), mean(none)
	machW := float64(cpuCount()) * ratio(float64(mbW), float64(mtW))
	machN := float64(cpuCount()) * ratio(float64(mbN), float64(mtN))
	s.info("CPU cores busy during the runs, with / none", fmt.Sprintf("these processes %.2f / %.2f, the whole machine %.2f / %.2f, of %d (the machine is shared: the rest is other users)", busyW, busyN, machW, machN, cpuCount()))
	s.info("mean latency vs Little's law (creators / throughput), with / none", fmt.Sprintf("%s vs %s / %s vs %s", ms(meanW), ms(time.Duration(float64(sz.Creators)/tw*float64(time.Second))), ms(meanN), ms(time.Duration(float64(sz.Creators)/tn*float64(time.Second)))))
	verdict := "stays within"
	if r99 > 1.10 {
		verdict = "misses"
	}
	bound := fmt.Sprintf("the whole machine was %.0f%% (with) and %.0f%% (none) busy, %.2f and %.2f of its %d cores by these processes and the rest by other users", 100*machW/float64(cpuCount()), 100*machN/float64(cpuCount()), busyW, busyN, cpuCount())
	s.note("**What dominates.** The ratio %s the 10%% budget: p99 %.2fx, p50 %.2fx, throughput %.2fx. The creators are a closed loop (%d calls always in flight), so mean latency = creators / throughput (Little's law, checked above), and throughput is bounded by CPU: %s. The webhooks add %.2f ms of CPU per pod (%.2f vs %.2f ms): kube-apiserver %+.2f ms (two AdmissionReviews to build and send over TLS, two answers to decode, a patch to apply), this process %+.2f ms (the webhook serving inject and guard; the creators' share is the same in both modes), etcd %+.2f ms. Waiting on the webhook is not what costs: the API server timed each webhook call at p99 ≤ %.1f ms, which is mostly waiting for a CPU, while the handlers' own decisions take p99 under %s. With spare cores (kube-apiserver on control-plane nodes, the webhook on workers) a pod pays the two webhook round trips, not a share of a saturated CPU; the series at %d creators above shows the time the webhooks add when few calls are in flight.\n",
		verdict, r99, r50, ratio(tw, tn), sz.Creators, bound, cw-cn, cw, cn,
		cpuDelta(cpuWith, cpuNone, "kube-apiserver", len(with), len(none)), cpuDelta(cpuWith, cpuNone, "bench process (creators + webhook in process + simulator)", len(with), len(none)), cpuDelta(cpuWith, cpuNone, "etcd", len(with), len(none)),
		hookP99*1000, oursP99(ours), sz.LowCreators)
}

func mean(l latencies) time.Duration {
	if len(l) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range l {
		t += d
	}
	return t / time.Duration(len(l))
}

// cpuDelta is the CPU per pod of process k, with minus none, in ms.
func cpuDelta(with, none map[string]time.Duration, k string, nw, nn int) float64 {
	return float64(with[k])/float64(nw)/1e6 - float64(none[k])/float64(nn)/1e6
}

// oursP99 is the upper bound of the bucket holding the p99 of the
// webhooks' own decision times (the worst webhook).
func oursP99(ours map[string]hist) string {
	upper := 0.0
	for _, h := range ours {
		rank := 0.99 * h.count
		for i, b := range h.bounds {
			if h.counts[i] >= rank {
				upper = max(upper, b)
				break
			}
		}
	}
	return fmt.Sprintf("%g ms (bucket bound)", upper*1000)
}
