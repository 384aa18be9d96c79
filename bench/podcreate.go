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
	with      bool   // mode == modeWith
	mode      string // modeWith, modeNone or modeWebhooksOnly
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
	s.how("runs alternate: with (everything manifests/install.yaml puts on the admission path: the MutatingAdmissionPolicy and ValidatingAdmissionPolicy that queue these pods and check their labels inside the API server, and the Mutating and ValidatingWebhookConfiguration, whose inject and guard webhooks the API server calls only for pods that may ask for GPUs, which these do not) and none (policies and configurations deleted), %d runs each; before each run the API server's view is confirmed by dry-run pods (queue label injected, foreign queue refused, or neither) and %d warm-up pods are created and not counted; all pods are deleted between runs (DeleteCollection)", sz.RunsPerMode, sz.Creators)
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

	runs, err := b.createSeries(ctx, namespaces, sz.Creators, sz.PodsPerRun, sz.RunsPerMode, "run", modeWith, modeNone, modeWebhooksOnly)
	if err != nil {
		s.Err = err
		return s
	}
	var low []*createRun
	if sz.LowCreators > 0 && ctx.Err() == nil {
		if low, err = b.createSeries(ctx, namespaces, sz.LowCreators, sz.LowPodsPerRun, sz.LowRunsPerMode, "low", modeWith, modeNone); err != nil {
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

// createSeries runs runsPerMode runs of each mode, the modes in turn,
// deleting the pods after each.
func (b *bed) createSeries(ctx context.Context, namespaces []string, creators, podsPerRun, runsPerMode int, prefix string, modes ...string) ([]*createRun, error) {
	var runs []*createRun
	for r := 0; r < len(modes)*runsPerMode && ctx.Err() == nil; r++ {
		label := modes[r%len(modes)]
		with := label == modeWith
		if err := b.setMode(ctx, label); err != nil {
			return nil, err
		}
		took, err := b.waitWebhooks(ctx, namespaces[0], label != modeNone)
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
		run := &createRun{with: with, mode: label, lat: lat, errs: errs, firstErr: ferr, wall: wall, cpu: subCPU(cpu1, cpu0), machineBusy: mb1 - mb0, machineTotal: mt1 - mt0}
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
		progress("part 2: %s %d/%d, %d creators (%s, applied after %s): %d pods in %s (%.0f pods/s), p50 %s, p99 %s, %d errors",
			prefix, r+1, len(modes)*runsPerMode, creators, label, took.Round(time.Millisecond), len(lat), wall.Round(time.Millisecond), float64(len(lat))/wall.Seconds(), ms(lat.pct(0.5)), ms(lat.pct(0.99)), errs)
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
		if r.mode == modeWebhooksOnly {
			continue
		}
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
		if r.mode == modeWebhooksOnly {
			continue
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
	_ = hookP99
	s.note("**What dominates.** The ratio %s the 10%% budget: p99 %.2fx, p50 %.2fx, throughput %.2fx. The creators are a closed loop (%d calls always in flight), so mean latency = creators / throughput (Little's law, checked above), and throughput is bounded by CPU: %s. Our admission adds %.2f ms of CPU per pod (%.2f vs %.2f ms): kube-apiserver %+.2f ms, this process %+.2f ms (the creators' share is the same in both modes; these pods never reach the webhooks), etcd %+.2f ms. In kube-apiserver the mutating policy is the largest part: putting a label and a scheduler on a pod, by any admission path (policy or webhook), makes the API server encode the pod to JSON, apply a JSON patch and decode it again, which a CPU profile of kube-apiserver under this load put at about 0.3 ms per pod, already more than 10%% of the %.2f ms a pod costs it without us; the validating policy's CEL and the webhooks' matchConditions add the rest. The runs with the webhooks alone (no policies, the chart with webhook.admissionPolicies=false) below show what the policies save. With spare cores (kube-apiserver on control-plane nodes) a pod pays only that CPU time, not a share of a saturated machine; the series at %d creators shows the time added when few calls are in flight.\n",
		verdict, r99, r50, ratio(tw, tn), sz.Creators, bound, cw-cn, cw, cn,
		cpuDelta(cpuWith, cpuNone, "kube-apiserver", len(with), len(none)), cpuDelta(cpuWith, cpuNone, benchProcess, len(with), len(none)), cpuDelta(cpuWith, cpuNone, "etcd", len(with), len(none)),
		float64(cpuNone["kube-apiserver"])/float64(len(none))/1e6, sz.LowCreators)
	reportWebhooksOnly(s, runs, sz)
}

// benchProcess is the cpuTimes key of this process.
const benchProcess = "bench process (creators + webhook in process + simulator)"

// reportWebhooksOnly compares, in the same run, our admission as installed
// (policies + narrowed webhooks) and as on clusters without admission
// policies (every pod through the inject and guard webhooks), each against
// none: what the design choice is worth on this machine.
func reportWebhooksOnly(s *section, runs []*createRun, sz sizes) {
	type agg struct {
		lat  latencies
		wall time.Duration
		cpu  map[string]time.Duration
		errs int
	}
	by := map[string]*agg{}
	for _, r := range runs {
		a := by[r.mode]
		if a == nil {
			a = &agg{cpu: map[string]time.Duration{}}
			by[r.mode] = a
		}
		a.lat = append(a.lat, r.lat...)
		a.wall += r.wall
		a.errs += r.errs
		for k, v := range r.cpu {
			a.cpu[k] += v
		}
	}
	w, n, h := by[modeWith], by[modeNone], by[modeWebhooksOnly]
	if w == nil || n == nil || h == nil || len(w.lat) == 0 || len(n.lat) == 0 || len(h.lat) == 0 {
		return
	}
	perPod := func(a *agg, k string) float64 { return float64(a.cpu[k]) / float64(len(a.lat)) / 1e6 }
	total := func(a *agg) float64 {
		var t time.Duration
		for _, v := range a.cpu {
			t += v
		}
		return float64(t) / float64(len(a.lat)) / 1e6
	}
	s.info(fmt.Sprintf("p99 create latency, webhooks only (no policies) / none (%d creators)", sz.Creators),
		fmt.Sprintf("%.2fx (%s vs %s); installed (policies) / webhooks only: %.2fx", ratio(float64(h.lat.pct(0.99)), float64(n.lat.pct(0.99))), ms(h.lat.pct(0.99)), ms(n.lat.pct(0.99)),
			ratio(float64(w.lat.pct(0.99)), float64(h.lat.pct(0.99)))))
	s.info("p50 create latency, webhooks only / none", fmt.Sprintf("%.2fx (%s vs %s)", ratio(float64(h.lat.pct(0.5)), float64(n.lat.pct(0.5))), ms(h.lat.pct(0.5)), ms(n.lat.pct(0.5))))
	s.info("throughput, installed / webhooks only / none", fmt.Sprintf("%.0f / %.0f / %.0f pods/s", float64(len(w.lat))/w.wall.Seconds(), float64(len(h.lat))/h.wall.Seconds(), float64(len(n.lat))/n.wall.Seconds()))
	s.info("CPU time per pod over none, installed vs webhooks only", fmt.Sprintf("%+.2f vs %+.2f ms (kube-apiserver %+.2f vs %+.2f, this process %+.2f vs %+.2f, etcd %+.2f vs %+.2f)",
		total(w)-total(n), total(h)-total(n),
		perPod(w, "kube-apiserver")-perPod(n, "kube-apiserver"), perPod(h, "kube-apiserver")-perPod(n, "kube-apiserver"),
		perPod(w, benchProcess)-perPod(n, benchProcess), perPod(h, benchProcess)-perPod(n, benchProcess),
		perPod(w, "etcd")-perPod(n, "etcd"), perPod(h, "etcd")-perPod(n, "etcd")))
	s.info("errors, webhooks-only runs", fmt.Sprint(h.errs))
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
