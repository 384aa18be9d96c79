package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hopsworks/runai-webhook/certs"
	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/app"
)

// binary is the built webhook and what it needs to serve.
type binary struct {
	dir, path, certDir string
	kubeconfig         string
	env                []string
}

func buildBinary(ctx context.Context, env *framework.Env) (*binary, error) {
	dir, err := os.MkdirTemp("", "runai-webhook-bench-")
	if err != nil {
		return nil, err
	}
	b := &binary{dir: dir, path: filepath.Join(dir, "runai-webhook"), certDir: filepath.Join(dir, "tls"), kubeconfig: env.AdminKubeconfig}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, "./cmd/webhook")
	cmd.Dir = env.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		b.cleanup()
		return nil, fmt.Errorf("go build ./cmd/webhook: %v\n%s", err, out)
	}
	pair, err := certs.Generate([]string{"127.0.0.1"}, 24*time.Hour)
	if err != nil {
		b.cleanup()
		return nil, err
	}
	if err := pair.Write(b.certDir); err != nil {
		b.cleanup()
		return nil, err
	}
	c := env.Config
	b.env = append(os.Environ(),
		"RUN_AI_ENABLE=true", "RUN_AI_URL="+c.RunAIURL, "RUN_AI_CLIENT_ID="+c.RunAIClientID,
		"RUN_AI_CLIENT_SECRET_FILE="+c.RunAIClientSecretFile,
		"RUN_AI_PROJECT_GPU_QUOTA="+strconv.FormatFloat(c.ProjectGPUQuota, 'f', -1, 64),
		"WEBHOOK_USER="+c.WebhookUser,
		// One line per GC with the live heap, for the report.
		"GODEBUG=gctrace=1",
	)
	return b, nil
}

func (b *binary) cleanup() { _ = os.RemoveAll(b.dir) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// memSample is what one start of the binary measured.
type memSample struct {
	pods, namespaces int
	readyAfter       time.Duration
	firstReview      time.Duration // includes the namespace cache's first sync
	secondReview     time.Duration
	rss, hwm         int64 // kB, after the reviews and a settle
	rssReady         int64 // kB at /readyz
	liveHeapMB       string
	lastGC           string
	log              string
}

// measure starts `runai-webhook serve` against the API server, waits for
// /readyz (caches synced), sends one review to inject and one to guard (the
// namespace cache starts on the first), then reads VmRSS and VmHWM; the
// process is stopped by its PID whatever happens.
func (b *binary) measure(ctx context.Context, label, probeNS string, settle time.Duration) (memSample, error) {
	var m memSample
	port, err := freePort()
	if err != nil {
		return m, err
	}
	hport, err := freePort()
	if err != nil {
		return m, err
	}
	logPath := filepath.Join(b.dir, "webhook-"+label+".log")
	m.log = logPath
	logFile, err := os.Create(logPath)
	if err != nil {
		return m, err
	}
	defer logFile.Close()
	cmd := exec.Command(b.path, "serve",
		"--kubeconfig", b.kubeconfig,
		"--webhook-host", "127.0.0.1", "--webhook-port", strconv.Itoa(port),
		"--cert-dir", b.certDir, "--metrics-addr", "0", "--health-addr", "127.0.0.1:"+strconv.Itoa(hport))
	cmd.Env = b.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return m, fmt.Errorf("starting %s: %w", b.path, err)
	}
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-done
		}
		progress("part 5: webhook pid %d stopped", pid)
	}()
	progress("part 5: webhook binary started, pid %d, waiting for /readyz", pid)

	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := start.Add(10 * time.Minute)
	for {
		select {
		case err := <-done:
			done <- err
			return m, fmt.Errorf("the webhook exited before ready: %v (log %s:\n%s)", err, logPath, fileTail(logPath, 15))
		default:
		}
		resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(hport) + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("the webhook was not ready within 10 minutes (log %s)", logPath)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return m, err
		}
	}
	m.readyAfter = time.Since(start)
	m.rssReady, _, _ = procStatus(pid)
	progress("part 5: ready after %s, RSS %s", m.readyAfter.Round(time.Millisecond), mib(m.rssReady))

	client, err := reviewClient(filepath.Join(b.certDir, "ca.crt"))
	if err != nil {
		return m, err
	}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	if m.firstReview, err = review(ctx, client, base+app.PathInject, probeNS, true); err != nil {
		return m, err
	}
	if m.secondReview, err = review(ctx, client, base+app.PathPodGuard, probeNS, false); err != nil {
		return m, err
	}
	if err := sleepCtx(ctx, settle); err != nil {
		return m, err
	}
	if m.rss, m.hwm, err = procStatus(pid); err != nil {
		return m, err
	}
	m.liveHeapMB, m.lastGC = lastGCTrace(logPath)
	return m, nil
}

func reviewClient(caFile string) (*http.Client, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no CA certificate in " + caFile)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// review sends one AdmissionReview for a job pod in ns, as kube-apiserver
// would, and checks the answer (inject: allowed with a patch; guard: allowed).
func review(ctx context.Context, c *http.Client, url, ns string, wantPatch bool) (time.Duration, error) {
	pod := jobPod(ns, "review-probe", nil)
	if !wantPatch { // the guard sees the pod after inject
		pod.Labels["runai/queue"] = ns
		pod.Spec.SchedulerName = "runai-scheduler"
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return 0, err
	}
	gvk := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	rv := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(fmt.Sprintf("bench-%d", time.Now().UnixNano())), Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
			Name: pod.Name, Namespace: ns, Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: "bench"},
			Object:   k8sruntime.RawExtension{Raw: raw},
		},
	}
	body, _ := json.Marshal(rv)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	t := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("review to %s: %w", url, err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("review to %s: status %d: %w", url, resp.StatusCode, err)
	}
	took := time.Since(t)
	if out.Response == nil || !out.Response.Allowed {
		return took, fmt.Errorf("review to %s was not allowed: %+v", url, out.Response)
	}
	if wantPatch && len(out.Response.Patch) == 0 {
		return took, fmt.Errorf("review to %s: no patch for a pod of bound namespace %s", url, ns)
	}
	return took, nil
}

var gcLine = regexp.MustCompile(`gc \d+ @.*?(\d+)->(\d+)->(\d+) MB, (\d+) MB goal`)

// lastGCTrace returns the live heap after the last GC (gctrace's third
// figure) and the whole line.
func lastGCTrace(path string) (string, string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	var live, line string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		if m := gcLine.FindStringSubmatch(sc.Text()); m != nil {
			live, line = m[3], strings.TrimSpace(sc.Text())
		}
	}
	return live, line
}

func fileTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(b, n)
}

// loadPods creates up to n pods spread over the scale namespaces until the
// deadline, reporting progress.
func (b *bed) loadPods(ctx context.Context, sz sizes, from, n int, deadline time.Time) (int, time.Duration, error) {
	var count atomic.Int64
	stopTicker := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTicker:
				return
			case <-t.C:
				c := count.Load()
				progress("part 5: %d pods created (%.0f/s)", int(c)+from, float64(c)/time.Since(start).Seconds())
			}
		}
	}()
	done, err := parallel(ctx, n, sz.LoadWorkers, deadline, func(k int) error {
		i := from + k
		ns := scaleName(i % sz.ScaleNamespaces)
		_, err := b.cs.CoreV1().Pods(ns).Create(ctx, b.loadPod(ns, fmt.Sprintf("load-%06d", i), i), metav1.CreateOptions{})
		if err == nil {
			count.Add(1)
		}
		return err
	})
	close(stopTicker)
	return done, time.Since(start), err
}

// childRSS reads the RSS of this process's children by command name.
func childRSS() map[string]int64 {
	out := map[string]int64{}
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procCPU(pid); !ok || ppid != self {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		rss, _, err := procStatus(pid)
		if err == nil {
			out[strings.TrimSpace(string(comm))] += rss
		}
	}
	return out
}

// memory is part 5.
func (b *bed) memory(ctx context.Context, s *section, sz sizes, bin *binary, nsTook time.Duration, nsRate float64) {
	const targetKB = 128 * 1024
	s.how("the built binary (`go build -o … ./cmd/webhook`) runs `runai-webhook serve --kubeconfig <admin kubeconfig> --webhook-host 127.0.0.1 --webhook-port <free> --cert-dir <certs.Generate> --metrics-addr 0 --health-addr 127.0.0.1:<free>` with RUN_AI_ENABLE=true, RUN_AI_URL=<simulator>, RUN_AI_CLIENT_ID, RUN_AI_CLIENT_SECRET_FILE (and GODEBUG=gctrace=1 to read its live heap); once /readyz answers (caches synced) one AdmissionReview goes to inject and one to guard (the namespace cache starts on the first), and after a settle VmRSS and VmHWM are read from /proc/<pid>/status; then it is stopped by its PID")
	s.how("it is measured twice: with the %d namespaces and no pods in them, then after loading pods (pods without nodes stay Pending) through the admin client (protobuf, %d concurrent creators, webhooks removed while loading) for at most %s; the per-pod cost is the difference divided by the pods, and the figure at %d pods is extrapolated from it when fewer were loaded", sz.ScaleNamespaces, sz.LoadWorkers, sz.LoadBudget, sz.ScalePods)
	probe := scaleName(0)
	settle := 5 * time.Second
	m0, err := bin.measure(ctx, "namespaces-only", probe, settle)
	if err != nil {
		s.Err = err
		return
	}
	progress("part 5: %d namespaces, 0 pods: RSS %s, HWM %s", sz.ScaleNamespaces, mib(m0.rss), mib(m0.hwm))

	deadline := time.Now().Add(sz.LoadBudget)
	loaded, took, lerr := b.loadPods(ctx, sz, 0, sz.ScalePods, deadline)
	rate := float64(loaded) / took.Seconds()
	progress("part 5: %d pods created in %s (%.0f/s)", loaded, took.Round(time.Millisecond), rate)
	if lerr != nil {
		s.note("Some pod creates failed while loading: `%s`", oneLine(lerr.Error()))
	}
	cp := childRSS()
	nsFull, nsStripped, nsErr := b.namespaceHeap(ctx)
	prof, perr := heapProfile(ctx, bin.dir)
	m1, err := bin.measure(ctx, "loaded", probe, settle)
	if err != nil {
		s.Err = err
		return
	}
	progress("part 5: %d namespaces, %d pods: RSS %s, HWM %s", sz.ScaleNamespaces, loaded, mib(m1.rss), mib(m1.hwm))

	perPodB := 0.0
	if loaded > 0 {
		perPodB = float64(m1.rss-m0.rss) * 1024 / float64(loaded)
	}
	full := loaded >= sz.ScalePods
	rssAt := float64(m1.rss)
	hwmAt := float64(m1.hwm)
	label := fmt.Sprintf("measured at %d pods", loaded)
	if !full && loaded > 0 {
		rssAt = float64(m0.rss) + perPodB*float64(sz.ScalePods)/1024
		perPodHWM := float64(m1.hwm-m0.hwm) * 1024 / float64(loaded)
		hwmAt = float64(m0.hwm) + perPodHWM*float64(sz.ScalePods)/1024
		label = fmt.Sprintf("extrapolated from %d pods", loaded)
	}
	s.add(fmt.Sprintf("webhook VmRSS with %d namespaces and %d pods", sz.ScaleNamespaces, sz.ScalePods), fmt.Sprintf("%s (%s)", mib(int64(rssAt)), label), "≤ 128 MiB", check(rssAt <= targetKB))
	s.add(fmt.Sprintf("webhook VmHWM (peak) with %d namespaces and %d pods", sz.ScaleNamespaces, sz.ScalePods), fmt.Sprintf("%s (%s)", mib(int64(hwmAt)), label), "≤ 128 MiB", check(hwmAt <= targetKB))
	s.info("webhook with the namespaces only (0 pods)", fmt.Sprintf("VmRSS %s, VmHWM %s, at ready %s; ready after %s; first review %s (includes the namespace cache's first sync), second %s; live heap after the last GC %s MB",
		mib(m0.rss), mib(m0.hwm), mib(m0.rssReady), secs(m0.readyAfter), ms(m0.firstReview), ms(m0.secondReview), orUnknown(m0.liveHeapMB)))
	s.info(fmt.Sprintf("webhook with %d pods", loaded), fmt.Sprintf("VmRSS %s, VmHWM %s, at ready %s; ready after %s; first review %s, second %s; live heap after the last GC %s MB",
		mib(m1.rss), mib(m1.hwm), mib(m1.rssReady), secs(m1.readyAfter), ms(m1.firstReview), ms(m1.secondReview), orUnknown(m1.liveHeapMB)))
	s.info("webhook memory per pod (RSS difference / pods)", fmt.Sprintf("%.0f bytes", perPodB))
	s.info("namespace creation through the API server", fmt.Sprintf("%d in %s (%.0f/s)", sz.ScaleNamespaces, secs(nsTook), nsRate))
	s.info("pod creation through the API server (no webhooks)", fmt.Sprintf("%d in %s (%.0f/s)%s", loaded, secs(took), rate, map[bool]string{true: "", false: fmt.Sprintf("; %d would take about %s at this rate", sz.ScalePods, secs(time.Duration(float64(sz.ScalePods)/rate*float64(time.Second))))}[full || rate == 0]))
	if nsErr == nil {
		s.info(fmt.Sprintf("heap of the %d namespaces as cached (decoded from the API server), with / without managedFields", nsFull.n),
			fmt.Sprintf("%.1f / %.1f MiB (%.0f / %.0f bytes each); the webhook's namespace cache keeps them whole", float64(nsFull.bytes)/(1<<20), float64(nsStripped.bytes)/(1<<20), float64(nsFull.bytes)/float64(nsFull.n), float64(nsStripped.bytes)/float64(nsFull.n)))
	} else {
		s.note("Namespace heap measurement: %v", nsErr)
	}
	nsNote, nsAdvice := "", ""
	if nsErr == nil {
		nsNote = fmt.Sprintf(" (decoded, the %d namespaces take %.1f MiB of heap, %.1f MiB without managedFields)", nsFull.n, float64(nsFull.bytes)/(1<<20), float64(nsStripped.bytes)/(1<<20))
		nsAdvice = fmt.Sprintf(" The namespace cache is the next largest part and is set up in pkg/app: stripping managedFields there (cache.Options DefaultTransform: cache.TransformStripManagedFields(); nothing reads them) would save %.1f MiB of heap here, about twice that of RSS.", float64(nsFull.bytes-nsStripped.bytes)/(1<<20))
	}
	s.note("**Where the memory goes.** Ready with empty caches the process holds %s; the namespace cache, which the first review starts, brings it to %s with %d namespaces%s; the pods add %s, %.0f bytes each. Each pod is cached as a kube.CachedPod (pkg/kube.StripPod: name, interned namespace, resource version, and only for a running or waiting non-preemptible GPU pod its GPUs and admission id), about 100 bytes, plus about 140 bytes of client-go's indexer (the key and the namespace index); RSS is about twice the live heap because GOGC=100 lets the heap grow to twice its live size between collections (last GC: %s MB live).%s",
		mib(m0.rssReady), mib(m0.rss), sz.ScaleNamespaces, nsNote, mib(m1.rss-m0.rss), perPodB, orUnknown(m1.liveHeapMB), nsAdvice)
	var rss []string
	for k, v := range cp {
		rss = append(rss, fmt.Sprintf("%s %s", k, mib(v)))
	}
	s.info("RSS of the control plane after loading", strings.Join(rss, ", "))
	if perr != nil {
		s.note("Heap profile: %v", perr)
	} else {
		s.note("What the heap holds after loading: `go tool pprof -top -inuse_space` of this process's heap (the webhook runs in it too, with the same wiring and caches as the binary: app.Run; the simulator's %d projects and the harness are in it as well), after a GC:\n\n```\n%s\n```", sz.ScaleNamespaces, prof)
	}
	if m1.lastGC != "" {
		s.note("Last GC line of the loaded run (gctrace: heap before → after → live MB): `%s`", m1.lastGC)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// heapProfile writes this process's heap profile after a GC and returns the
// top of `go tool pprof -top -inuse_space`.
func heapProfile(ctx context.Context, dir string) (string, error) {
	runtime.GC()
	path := filepath.Join(dir, "bench-heap.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-inuse_space", "-nodecount=18", path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v: %s", err, out)
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") || strings.TrimSpace(l) == "" {
			continue
		}
		keep = append(keep, l)
	}
	return fmt.Sprintf("HeapInuse %.1f MiB, HeapAlloc %.1f MiB\n%s", float64(ms.HeapInuse)/(1<<20), float64(ms.HeapAlloc)/(1<<20), strings.Join(keep, "\n")), nil
}

type heapSize struct {
	n     int
	bytes int64
}

// namespaceHeap measures the heap that the cluster's namespaces take once
// decoded (what an informer keeps), whole and without managedFields.
func (b *bed) namespaceHeap(ctx context.Context) (full, stripped heapSize, err error) {
	var m0, m1, m2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	l, err := b.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return full, stripped, err
	}
	// One object each, as an informer holds them (not one slice).
	objs := make([]*corev1.Namespace, len(l.Items))
	for i := range l.Items {
		n := l.Items[i]
		objs[i] = &n
	}
	l = nil
	runtime.GC()
	runtime.ReadMemStats(&m1)
	for _, n := range objs {
		n.ManagedFields = nil
	}
	runtime.GC()
	runtime.ReadMemStats(&m2)
	runtime.KeepAlive(objs)
	slice := int64(8 * len(objs))
	full = heapSize{n: len(objs), bytes: int64(m1.HeapAlloc) - int64(m0.HeapAlloc) - slice}
	stripped = heapSize{n: len(objs), bytes: int64(m2.HeapAlloc) - int64(m0.HeapAlloc) - slice}
	return full, stripped, nil
}
