// Command bench runs runai-webhook's performance benchmarks, each against a
// baseline measured in the same run, and writes bench/REPORT.md:
//
//  1. handler micro-benchmarks (pkg/mutate) against controller-runtime's
//     generic decode-and-diff path;
//  2. pod creation through a real kube-apiserver with every webhook
//     installed vs none, alternating runs;
//  3. the first-pod binding storm against the Run:ai simulator with latency;
//  4. one reconcile pass over 10,000 managed namespaces;
//  5. the webhook process's memory with 10,000 namespaces and 150,000 pods;
//  6. the hot-path regression guard (TestHotPathBudget).
//
// Usage (from the repository root; `make bench` runs the full mode):
//
//	go run ./bench            # full: about 9 minutes on 2 cores
//	go run ./bench -quick     # small sizes, a couple of minutes
//	go run ./bench -parts create,storm -pods-per-run 500
//
// It starts the end-to-end test bed (e2e/framework: etcd, kube-apiserver, the
// Run:ai simulator, the webhook in process with the production webhook
// configurations), and for part 5 the built binary; everything started is
// stopped on exit, also on error or interrupt.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// sizes of one run; -quick shrinks them.
type sizes struct {
	BenchCount int
	BenchTime  string

	Creators, PodsPerRun, RunsPerMode, BoundNamespaces int
	LowCreators, LowPodsPerRun, LowRunsPerMode         int

	SimLatency                 time.Duration
	StormPods, StormNamespaces int

	ScaleNamespaces, ScalePods int
	LoadBudget                 time.Duration
	LoadWorkers                int
}

func fullSizes() sizes {
	return sizes{
		BenchCount: 5,
		Creators:   50, PodsPerRun: 1200, RunsPerMode: 3, BoundNamespaces: 10,
		LowCreators: 4, LowPodsPerRun: 500, LowRunsPerMode: 2,
		SimLatency: 20 * time.Millisecond, StormPods: 200, StormNamespaces: 100,
		ScaleNamespaces: 10000, ScalePods: 150000, LoadBudget: 6 * time.Minute, LoadWorkers: 48,
	}
}

func quickSizes() sizes {
	return sizes{
		BenchCount: 2, BenchTime: "200ms",
		Creators: 20, PodsPerRun: 300, RunsPerMode: 2, BoundNamespaces: 4,
		LowCreators: 2, LowPodsPerRun: 100, LowRunsPerMode: 1,
		SimLatency: 20 * time.Millisecond, StormPods: 60, StormNamespaces: 20,
		ScaleNamespaces: 1000, ScalePods: 10000, LoadBudget: 45 * time.Second, LoadWorkers: 32,
	}
}

var logOut io.Writer = os.Stderr

func progress(format string, a ...any) {
	fmt.Fprintf(logOut, "bench: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	quick := flag.Bool("quick", false, "small sizes (a couple of minutes), for checking the harness")
	out := flag.String("out", "", "report file (default bench/REPORT.md; with -quick, a file in the temp folder)")
	parts := flag.String("parts", "micro,create,storm,pass,memory,guard", "comma-separated parts to run: micro, create, storm, pass, memory, guard")
	root := flag.String("root", "", "repository root (default: found from the working directory)")
	verbose := flag.Bool("v", false, "also print the test bed's own progress lines")
	var o sizes
	def := fullSizes()
	flag.IntVar(&o.BenchCount, "bench-count", -1, fmt.Sprintf("part 1: -count of go test -bench (default %d)", def.BenchCount))
	flag.StringVar(&o.BenchTime, "bench-time", "", "part 1: -benchtime of go test -bench (default go's)")
	flag.IntVar(&o.Creators, "creators", -1, fmt.Sprintf("part 2: concurrent pod creators (default %d)", def.Creators))
	flag.IntVar(&o.PodsPerRun, "pods-per-run", -1, fmt.Sprintf("part 2: pods created per run (default %d)", def.PodsPerRun))
	flag.IntVar(&o.RunsPerMode, "runs", -1, fmt.Sprintf("part 2: runs per mode, alternating (default %d)", def.RunsPerMode))
	flag.IntVar(&o.LowCreators, "low-creators", -1, fmt.Sprintf("part 2: creators of the second, unsaturated series; 0 skips it (default %d)", def.LowCreators))
	flag.IntVar(&o.BoundNamespaces, "bound-namespaces", -1, fmt.Sprintf("part 2: bound namespaces the pods go to (default %d)", def.BoundNamespaces))
	flag.DurationVar(&o.SimLatency, "sim-latency", -1, fmt.Sprintf("part 3: Run:ai simulator latency (default %s)", def.SimLatency))
	flag.IntVar(&o.StormPods, "storm-pods", -1, fmt.Sprintf("part 3: pods of each storm (default %d)", def.StormPods))
	flag.IntVar(&o.StormNamespaces, "storm-namespaces", -1, fmt.Sprintf("part 3b: fresh namespaces the second storm spreads over (default %d)", def.StormNamespaces))
	flag.IntVar(&o.ScaleNamespaces, "scale-namespaces", -1, fmt.Sprintf("parts 4-5: managed, bound namespaces (default %d)", def.ScaleNamespaces))
	flag.IntVar(&o.ScalePods, "scale-pods", -1, fmt.Sprintf("part 5: pods in the API server (default %d)", def.ScalePods))
	flag.DurationVar(&o.LoadBudget, "load-budget", -1, fmt.Sprintf("part 5: longest time spent creating pods; fewer pods are extrapolated (default %s)", def.LoadBudget))
	flag.IntVar(&o.LoadWorkers, "load-workers", -1, fmt.Sprintf("parts 4-5: concurrent creators while loading (default %d)", def.LoadWorkers))
	flag.Parse()

	sz := def
	mode := "full"
	if *quick {
		sz, mode = quickSizes(), "quick"
	}
	overrideInt(&sz.BenchCount, o.BenchCount)
	if o.BenchTime != "" {
		sz.BenchTime = o.BenchTime
	}
	overrideInt(&sz.Creators, o.Creators)
	overrideInt(&sz.PodsPerRun, o.PodsPerRun)
	overrideInt(&sz.RunsPerMode, o.RunsPerMode)
	overrideInt(&sz.BoundNamespaces, o.BoundNamespaces)
	overrideInt(&sz.LowCreators, o.LowCreators)
	if o.SimLatency >= 0 {
		sz.SimLatency = o.SimLatency
	}
	overrideInt(&sz.StormPods, o.StormPods)
	overrideInt(&sz.StormNamespaces, o.StormNamespaces)
	overrideInt(&sz.ScaleNamespaces, o.ScaleNamespaces)
	overrideInt(&sz.ScalePods, o.ScalePods)
	if o.LoadBudget >= 0 {
		sz.LoadBudget = o.LoadBudget
	}
	overrideInt(&sz.LoadWorkers, o.LoadWorkers)

	want := map[string]bool{}
	for _, p := range strings.Split(*parts, ",") {
		if p = strings.TrimSpace(p); p != "" {
			want[p] = true
		}
	}
	for p := range want {
		switch p {
		case "micro", "create", "storm", "pass", "memory", "guard":
		default:
			return fmt.Errorf("unknown part %q (want micro, create, storm, pass, memory, guard)", p)
		}
	}

	if *root == "" {
		r, err := framework.FindRoot()
		if err != nil {
			return err
		}
		*root = r
	}
	if *out == "" {
		*out = filepath.Join(*root, "bench", "REPORT.md")
		if *quick {
			*out = filepath.Join(os.TempDir(), "runai-webhook-bench-quick.md")
		}
	}
	command := "go run ./bench"
	if len(os.Args) > 1 {
		command += " " + strings.Join(os.Args[1:], " ")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	m := readMachine(*root)
	progress("%s mode on %d CPUs (%s), %s; report goes to %s", mode, m.CPUs, m.Model, m.GoVersion, *out)

	var sections []*section
	if want["micro"] {
		sections = append(sections, microBenchmarks(ctx, *root, sz))
	}
	if want["create"] || want["storm"] || want["pass"] || want["memory"] {
		ss, err := clusterParts(ctx, *root, sz, want, *verbose)
		sections = append(sections, ss...)
		if err != nil {
			sections = append(sections, &section{Title: "Test bed", Err: err})
		}
	}
	if want["guard"] {
		sections = append(sections, hotPathGuard(ctx, *root))
	}
	m.LoadEnd = loadAvg()
	report := render(m, command, mode, time.Since(began), sections)
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	fmt.Println(report)
	progress("wrote %s in %s", *out, time.Since(began).Round(time.Second))
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return nil
}

func overrideInt(dst *int, v int) {
	if v >= 0 {
		*dst = v
	}
}

// seed is the simulator's state: the default department and two more.
func seed() runaitest.Seed {
	return runaitest.Seed{
		ClientID: framework.ClientID, ClientSecret: framework.ClientSecret,
		Departments: []runaitest.DepartmentSeed{{Name: "research"}, {Name: "vision"}},
	}
}

// clusterParts runs parts 2-5 on one test bed, in an order that keeps each
// measurement clean: pod creation and the storm on a small API server, then
// the load of parts 4 and 5.
func clusterParts(ctx context.Context, root string, sz sizes, want map[string]bool, verbose bool) (sections []*section, err error) {
	progress("starting the test bed (etcd, kube-apiserver, Run:ai simulator, webhook in process; no kube-controller-manager)")
	var harnessLog io.Writer
	if verbose {
		harnessLog = os.Stderr
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	env, err := framework.Start(startCtx, framework.Options{
		Root: root, Seed: seed(), Log: harnessLog,
		// Pods without nodes stay Pending and nothing here needs Deployments
		// or the namespace controller; kube-controller-manager would only add
		// its garbage collector's watch of every pod to the load.
		NoControllerManager: true,
		Configure: func(c *config.Config) {
			c.ProjectGPUQuota = 2
			c.BindTimeout = 5 * time.Second
		},
	})
	if err != nil {
		return nil, fmt.Errorf("starting the test bed: %w", err)
	}
	progress("test bed up in %s (API server %s, Run:ai simulator %s)", time.Since(t0).Round(time.Millisecond), env.Admin.Host, env.Sim.URL())
	var stopOnce sync.Once
	stopEnv := func() {
		stopOnce.Do(func() {
			progress("stopping the test bed")
			if err := env.Stop(); err != nil {
				progress("stopping the test bed: %v", err)
			}
		})
	}
	defer stopEnv()

	b, err := newBed(env)
	if err != nil {
		return nil, err
	}
	if want["create"] {
		sections = append(sections, b.podCreation(ctx, sz))
	}
	if want["storm"] && ctx.Err() == nil {
		sections = append(sections, b.storm(ctx, sz))
	}
	if (want["pass"] || want["memory"]) && ctx.Err() == nil {
		sections = append(sections, b.scale(ctx, sz, want["pass"], want["memory"])...)
	}
	return sections, ctx.Err()
}
