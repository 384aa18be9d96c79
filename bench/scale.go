package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

const scalePrefix = "scale-"

func scaleName(i int) string { return fmt.Sprintf("%s%05d", scalePrefix, i) }

// parallel runs fn(i) for i in [0, n) on workers goroutines until ctx ends
// or deadline passes (zero: none); it returns how many calls succeeded and
// the first error.
func parallel(ctx context.Context, n, workers int, deadline time.Time, fn func(i int) error) (int, error) {
	var next, done atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = fmt.Errorf("item %d: %w", i, err) })
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(done.Load()), first
}

// probeNamespace returns a bound namespace for the webhook probes.
func (b *bed) probeNamespace(ctx context.Context) (string, error) {
	const name = "bench-probe"
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, b.managedNamespace(name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return name, b.waitBound(ctx, []string{name}, 60*time.Second)
}

// scale runs parts 4 and 5 on one loaded API server.
func (b *bed) scale(ctx context.Context, sz sizes, doPass, doMemory bool) []*section {
	passS := &section{Title: fmt.Sprintf("4. Reconcile at scale: one full pass over %d managed namespaces", sz.ScaleNamespaces)}
	memS := &section{Title: fmt.Sprintf("5. Memory: the webhook process with %d namespaces and %d pods in the API server", sz.ScaleNamespaces, sz.ScalePods)}
	var out []*section
	if doPass {
		out = append(out, passS)
	}
	if doMemory {
		out = append(out, memS)
	}
	fail := func(err error) []*section {
		for _, s := range out {
			if s.Err == nil && len(s.Rows) == 0 {
				s.Err = err
			}
		}
		return out
	}

	var bin *binary
	if doMemory {
		// Build first, while nothing else runs.
		t := time.Now()
		var err error
		if bin, err = buildBinary(ctx, b.env); err != nil {
			return fail(err)
		}
		defer bin.cleanup()
		progress("part 5: built the webhook binary in %s", time.Since(t).Round(time.Second))
	}

	// Loading goes around admission: no webhooks while loading.
	probe, err := b.probeNamespace(ctx)
	if err != nil {
		return fail(err)
	}
	if err := b.setWebhooks(ctx, false); err != nil {
		return fail(err)
	}
	if _, err := b.waitWebhooks(ctx, probe, false); err != nil {
		return fail(err)
	}

	// Run:ai: one project per namespace, half created through the API as the
	// binder does (our marker; the namespace carries the project id), half
	// adopted (made by an administrator, found by name).
	t := time.Now()
	rc, err := app.NewRunAIClient(b.env.Config, logr.Discard())
	if err != nil {
		return fail(err)
	}
	cluster, err := rc.Cluster(ctx)
	if err != nil {
		return fail(err)
	}
	pool, err := rc.DefaultNodePool(ctx, cluster.UUID)
	if err != nil {
		return fail(err)
	}
	research, _ := b.env.Sim.DepartmentByName("research")
	def, _ := b.env.Sim.DepartmentByName("default")
	ids := make([]string, sz.ScaleNamespaces)
	deptOf := func(i int) (runai.Department, string) {
		if i%4 == 0 {
			return research, "research"
		}
		return def, ""
	}
	created, err := parallel(ctx, (sz.ScaleNamespaces+1)/2, 16, time.Time{}, func(k int) error {
		i := 2 * k
		d, _ := deptOf(i)
		p, err := rc.CreateProject(ctx, bind.NewProjectRequest(cluster.UUID, d.ID, scaleName(i), pool, 0))
		ids[i] = p.ID
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("creating Run:ai projects: %w", err))
	}
	for i := 1; i < sz.ScaleNamespaces; i += 2 {
		_, dn := deptOf(i)
		if dn == "" {
			dn = "default"
		}
		b.env.Sim.AddProject(runaitest.ProjectSeed{Name: "adopted-" + scaleName(i), Namespace: scaleName(i), Department: dn})
	}
	simTook := time.Since(t)
	progress("parts 4-5: %d Run:ai projects (%d created through the API, the rest seeded) in %s", sz.ScaleNamespaces, created, simTook.Round(time.Millisecond))

	// Kubernetes: the bound namespaces, as the binder leaves them.
	t = time.Now()
	nsCreated, err := parallel(ctx, sz.ScaleNamespaces, sz.LoadWorkers, time.Time{}, func(i int) error {
		ns := b.managedNamespace(scaleName(i))
		if _, dn := deptOf(i); dn != "" {
			ns.Labels[b.env.Config.DepartmentLabel] = dn
		}
		if i%2 == 0 {
			ns.Labels[b.queueKey] = scaleName(i)
			ns.Labels[nsview.ProjectIDLabel] = ids[i]
			ns.Finalizers = []string{bind.Finalizer}
		} else {
			ns.Labels[b.queueKey] = "adopted-" + scaleName(i)
		}
		ns.Annotations = map[string]string{bind.StatusAnnotation: bind.StatusOK}
		_, err := b.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	nsTook := time.Since(t)
	if err != nil {
		return fail(fmt.Errorf("creating namespaces: %w", err))
	}
	nsRate := float64(nsCreated) / nsTook.Seconds()
	progress("parts 4-5: %d namespaces created through the API server in %s (%.0f/s)", nsCreated, nsTook.Round(time.Millisecond), nsRate)

	if doPass {
		b.passAtScale(ctx, passS, sz, nsTook, nsRate, simTook)
	}
	if doMemory && ctx.Err() == nil {
		b.memory(ctx, memS, sz, bin, nsTook, nsRate)
	}
	return out
}

// passAtScale is part 4.
func (b *bed) passAtScale(ctx context.Context, s *section, sz sizes, nsTook time.Duration, nsRate float64, simTook time.Duration) {
	s.how("%d namespaces created through the API server (admin client, %d concurrent creators, webhooks removed while loading) in %s (%.0f namespaces/s): the namespaces as the binder leaves them (queue label, status OK; half with our project id and finalizer, half adopted); the simulator holds a matching project for each (half created through its API with our marker, half seeded) — built in %s", sz.ScaleNamespaces, sz.LoadWorkers, secs(nsTook), nsRate, secs(simTook))
	s.how("the pass is the production one (bind.Controller.Pass of the webhook running in process, reading namespaces from its cache, Run:ai through the production client); a first pass settles the namespaces left by the earlier parts, the second is measured with the simulator's call log reset before it; Kubernetes writes are counted from kube-apiserver's apiserver_request_total")
	if b.env.Controller == nil {
		s.Err = fmt.Errorf("the test bed has no in-process controller")
		return
	}
	// Wait until the controller's cache holds every namespace.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var l corev1.NamespaceList
		n := 0
		if err := b.env.Controller.Client.List(ctx, &l); err == nil {
			for _, ns := range l.Items {
				if strings.HasPrefix(ns.Name, scalePrefix) {
					n++
				}
			}
		}
		if n >= sz.ScaleNamespaces {
			break
		}
		if time.Now().After(deadline) {
			s.Err = fmt.Errorf("the controller's cache holds %d of %d namespaces after 3 minutes", n, sz.ScaleNamespaces)
			return
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			s.Err = err
			return
		}
	}
	k8sWrites := func(samples []sample) float64 {
		return promSum(samples, "apiserver_request_total", func(l map[string]string) bool {
			switch l["verb"] {
			case "POST", "PUT", "PATCH", "DELETE", "APPLY":
			default:
				return false
			}
			return l["resource"] == "namespaces" || l["resource"] == "events"
		})
	}
	// Settling pass.
	m0, err := b.scrape(ctx)
	if err != nil {
		s.Err = err
		return
	}
	t := time.Now()
	res1, err1 := b.env.Controller.Pass(ctx)
	took1 := time.Since(t)
	m1, err := b.scrape(ctx)
	if err != nil {
		s.Err = err
		return
	}
	progress("part 4: settling pass over %d namespaces in %s (%d Kubernetes writes)", res1.Namespaces, took1.Round(time.Millisecond), int(k8sWrites(m1)-k8sWrites(m0)))

	// Measured pass.
	b.env.Sim.ResetCalls()
	t = time.Now()
	res, err := b.env.Controller.Pass(ctx)
	took := time.Since(t)
	m2, serr := b.scrape(ctx)
	if serr != nil {
		s.Err = serr
		return
	}
	projects, depts := len(b.env.Sim.Projects()), len(b.env.Sim.Departments())
	var reads, writes, tokens int
	byPath := map[string]int{}
	for _, c := range b.env.Sim.Calls() {
		if c.Path == "/api/v1/token" || c.Path == "/api/v2/token" {
			tokens++
			continue
		}
		byPath[c.Method+" "+c.Path]++
		if c.Method == http.MethodGet {
			reads++
		}
	}
	writes = b.env.Sim.CountWrites()
	budget := int(math.Ceil(float64(projects)/runaitest.MaxPageSize)) + int(math.Ceil(float64(depts)/runaitest.MaxPageSize)) + 2
	kw := int(k8sWrites(m2) - k8sWrites(m1))
	progress("part 4: measured pass over %d namespaces in %s: %d Run:ai reads (budget %d), %d Run:ai writes, %d Kubernetes writes", res.Namespaces, took.Round(time.Millisecond), reads, budget, writes, kw)

	s.add("Run:ai reads in one pass", fmt.Sprintf("%d (%d projects, %d departments)", reads, projects, depts),
		fmt.Sprintf("≤ ceil(%d/500) + ceil(%d/500) + 2 = %d", projects, depts, budget), check(reads <= budget))
	s.add("Run:ai writes in the pass (nothing changed)", fmt.Sprint(writes), "0", check(writes == 0))
	s.add("Kubernetes writes in the pass (namespaces and events)", fmt.Sprint(kw), "0", check(kw == 0))
	s.add("pass result", fmt.Sprintf("%d namespaces looked at, %d bound, %d rebound, %d drift, %d unbound, %d orphans deleted, %d failures", res.Namespaces, res.Bound, res.Rebound, res.Drift, res.Unbound, res.OrphansDeleted, len(res.Failures)),
		fmt.Sprintf("≥ %d namespaces, nothing to do", sz.ScaleNamespaces), check(err == nil && res.Namespaces >= sz.ScaleNamespaces && res.Bound+res.Rebound+res.Drift+res.Unbound+res.OrphansDeleted == 0))
	s.info("pass duration (measured pass)", secs(took))
	s.info("settling pass", fmt.Sprintf("%s, %d Kubernetes writes (statuses of the earlier parts' namespaces), error: %v", secs(took1), int(k8sWrites(m1)-k8sWrites(m0)), err1))
	keys := make([]string, 0, len(byPath))
	for k := range byPath {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var calls []string
	for _, k := range keys {
		calls = append(calls, fmt.Sprintf("%s ×%d", k, byPath[k]))
	}
	s.info("Run:ai calls of the pass", fmt.Sprintf("%s; token requests: %d", strings.Join(calls, ", "), tokens))
	s.note("Namespaces were created through the API server (not the fake-client fallback): %d in %s.", sz.ScaleNamespaces, secs(nsTook))
	if err != nil {
		s.note("The pass returned an error: `%s`", oneLine(err.Error()))
	}
}

// procStatus reads VmRSS and VmHWM (kB) of pid.
func procStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		var n int64
		fmt.Sscanf(strings.TrimSpace(v), "%d", &n)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm, nil
}
