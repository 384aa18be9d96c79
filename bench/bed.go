package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/mutate"
	"github.com/hopsworks/runai-webhook/pkg/workload"
)

// bed wraps the test bed with what the benchmarks need: a fast admin client,
// the installed webhook configurations (to remove and restore them), and the
// API server's metrics.
type bed struct {
	env        *framework.Env
	cs         *kubernetes.Clientset // admin, protobuf, no client-side rate limit
	queueKey   string
	projectKey string
	mwc        *admissionregistrationv1.MutatingWebhookConfiguration
	vwc        *admissionregistrationv1.ValidatingWebhookConfiguration
	// policies are the chart's admission policies and their bindings, as
	// installed: part of "with", removed for "none".
	policies   []client.Object
	webhooksOn bool
}

// fastConfig is the admin's REST config without client-side throttling, in
// protobuf (as controllers talk to the API server).
func fastConfig(admin *rest.Config) *rest.Config {
	c := rest.CopyConfig(admin)
	c.QPS, c.Burst = 1e6, 1e6
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c.Timeout = 60 * time.Second
	return c
}

func newBed(env *framework.Env) (*bed, error) {
	cs, err := kubernetes.NewForConfig(fastConfig(env.Admin))
	if err != nil {
		return nil, err
	}
	b := &bed{env: env, cs: cs, queueKey: env.Config.QueueLabelKey, projectKey: env.Config.ProjectLabel, webhooksOn: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Save the installed configurations (the chart's, with clientConfig
	// rewritten by the harness) to restore them after a run without.
	if b.mwc, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, framework.ReleaseName, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("reading the installed MutatingWebhookConfiguration: %w", err)
	}
	if b.vwc, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.ReleaseName, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("reading the installed ValidatingWebhookConfiguration: %w", err)
	}
	metas := []*metav1.ObjectMeta{&b.mwc.ObjectMeta, &b.vwc.ObjectMeta}
	for _, l := range []client.ObjectList{
		&admissionregistrationv1.MutatingAdmissionPolicyList{}, &admissionregistrationv1.MutatingAdmissionPolicyBindingList{},
		&admissionregistrationv1.ValidatingAdmissionPolicyList{}, &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{},
	} {
		if err := env.Client.List(ctx, l); err != nil {
			return nil, fmt.Errorf("reading the installed admission policies: %w", err)
		}
		if err := meta.EachListItem(l, func(o runtime.Object) error {
			obj := o.(client.Object)
			if !strings.HasPrefix(obj.GetName(), framework.ReleaseName) {
				return nil
			}
			b.policies = append(b.policies, obj)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	for _, o := range b.policies {
		o.SetResourceVersion("")
		o.SetUID("")
		o.SetManagedFields(nil)
		o.SetGeneration(0)
		o.SetCreationTimestamp(metav1.Time{})
	}
	for _, m := range metas {
		m.ResourceVersion, m.UID, m.ManagedFields, m.Generation, m.CreationTimestamp = "", "", nil, 0, metav1.Time{}
	}
	return b, nil
}

// setPolicies installs (on) or removes (off) the chart's admission policies.
func (b *bed) setPolicies(ctx context.Context, on bool) error {
	for _, o := range b.policies {
		obj := o.DeepCopyObject().(client.Object)
		var err error
		if on {
			if err = b.env.Client.Create(ctx, obj); apierrors.IsAlreadyExists(err) {
				err = nil
			}
		} else if err = b.env.Client.Delete(ctx, obj); apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("setting admission policy %s (%T) to %v: %w", o.GetName(), o, on, err)
		}
	}
	return nil
}

// Modes of part 2's runs.
const (
	// modeWith: everything manifests/install.yaml puts on the admission
	// path (admission policies, webhooks narrowed by matchConditions).
	modeWith = "with"
	// modeNone: nothing of ours.
	modeNone = "none"
	// modeWebhooksOnly: the chart with webhook.admissionPolicies=false, for
	// clusters without admission policies: no policies, every pod of a
	// bound namespace through the inject and guard webhooks.
	modeWebhooksOnly = "webhooks only"
)

// setMode installs what mode puts on the admission path.
// It removes everything first, so no object of the previous mode stays.
func (b *bed) setMode(ctx context.Context, mode string) error {
	if err := b.setWebhooks(ctx, false); err != nil {
		return err
	}
	switch mode {
	case modeWith:
		return b.setWebhooks(ctx, true)
	case modeNone:
		return nil
	case modeWebhooksOnly:
		mwc, vwc := webhooksOnly(b.mwc, b.vwc)
		ar := b.cs.AdmissionregistrationV1()
		if _, err := ar.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the webhooks-only MutatingWebhookConfiguration: %w", err)
		}
		if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the webhooks-only ValidatingWebhookConfiguration: %w", err)
		}
		b.webhooksOn = true
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// webhooksOnly is what the chart renders with webhook.admissionPolicies
// false: the same webhooks without matchConditions, the pod guard on CREATE
// and UPDATE (it then enforces the label rules itself).
func webhooksOnly(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	m, v = m.DeepCopy(), v.DeepCopy()
	for i := range m.Webhooks {
		m.Webhooks[i].MatchConditions = nil
	}
	for i := range v.Webhooks {
		if v.Webhooks[i].MatchConditions == nil {
			continue
		}
		v.Webhooks[i].MatchConditions = nil
		for j := range v.Webhooks[i].Rules {
			v.Webhooks[i].Rules[j].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
		}
	}
	return m, v
}

// setWebhooks installs (on) or removes (off) both webhook configurations and
// the admission policies: everything of ours on the admission path.
func (b *bed) setWebhooks(ctx context.Context, on bool) error {
	if err := b.setPolicies(ctx, on); err != nil {
		return err
	}
	ar := b.cs.AdmissionregistrationV1()
	if on {
		if _, err := ar.MutatingWebhookConfigurations().Create(ctx, b.mwc.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("re-creating the MutatingWebhookConfiguration: %w", err)
		}
		if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, b.vwc.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("re-creating the ValidatingWebhookConfiguration: %w", err)
		}
	} else {
		if err := ar.MutatingWebhookConfigurations().Delete(ctx, framework.ReleaseName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the MutatingWebhookConfiguration: %w", err)
		}
		if err := ar.ValidatingWebhookConfigurations().Delete(ctx, framework.ReleaseName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the ValidatingWebhookConfiguration: %w", err)
		}
	}
	b.webhooksOn = on
	return nil
}

// waitWebhooks waits until the API server applies the configurations as set:
// a dry-run pod in the bound namespace ns gets the queue label (inject) and
// a dry-run pod with a foreign queue label is refused (guard), or neither.
func (b *bed) waitWebhooks(ctx context.Context, ns string, on bool) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var last string
	for time.Now().Before(deadline) {
		plain, err := b.cs.CoreV1().Pods(ns).Create(ctx, jobPod(ns, "probe-webhooks", nil), dry)
		if err != nil {
			last = "plain dry-run pod: " + err.Error()
		} else {
			foreign := jobPod(ns, "probe-webhooks-foreign", map[string]string{b.queueKey: "someone-else"})
			_, ferr := b.cs.CoreV1().Pods(ns).Create(ctx, foreign, dry)
			injected := plain.Labels[b.queueKey] == ns
			guarded := ferr != nil
			if injected == on && guarded == on {
				return time.Since(start), nil
			}
			last = fmt.Sprintf("queue label injected: %v, foreign queue refused: %v", injected, guarded)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("the API server did not apply webhooks=%v within 60s (%s)", on, last)
}

// jobPod is a simple non-GPU pod of workload type job.
func jobPod(ns, name string, extra map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
		workload.TypeLabel: "job", "app": "bench",
	}}}
	for k, v := range extra {
		p.Labels[k] = v
	}
	p.Spec.Containers = []corev1.Container{{
		Name: "main", Image: "registry.invalid/bench/job:1", Command: []string{"python", "train.py"},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
		}},
	}}
	return p
}

// loadPod is a pod as the webhook would have left it (queue label, Run:ai
// scheduler), for loading the API server with webhooks removed; every tenth
// is a notebook with one GPU and its admission id.
func (b *bed) loadPod(ns, name string, i int) *corev1.Pod {
	p := jobPod(ns, name, map[string]string{b.queueKey: ns})
	p.Spec.SchedulerName = "runai-scheduler"
	c := &p.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "HOPSWORKS_PROJECT", Value: ns}, {Name: "JOB_INDEX", Value: strconv.Itoa(i)}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if i%10 == 0 {
		p.Labels[workload.TypeLabel] = "notebook"
		p.Annotations = map[string]string{mutate.ReservationAnnotation: fmt.Sprintf("bench-%d", i)}
		c.Resources.Limits = corev1.ResourceList{workload.GPUResource: resource.MustParse("1")}
	}
	return p
}

// managedNamespace is a Hopsworks project namespace.
func (b *bed) managedNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{b.projectKey: name}}}
}

// waitBound waits until every namespace carries the queue label.
func (b *bed) waitBound(ctx context.Context, names []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, n := range names {
		for {
			ns, err := b.cs.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
			if err == nil && ns.Labels[b.queueKey] != "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("namespace %s not bound within %s", n, within)
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// deletePods deletes every pod of the namespaces and waits until they are
// gone (pods without a node go at once).
func (b *bed) deletePods(ctx context.Context, namespaces []string) error {
	zero := int64(0)
	for _, ns := range namespaces {
		if err := b.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("deleting the pods of %s: %w", ns, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, ns := range namespaces {
		for {
			l, err := b.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil && len(l.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pods of %s still there after 2 minutes", ns)
			}
			if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// scrape reads kube-apiserver's own /metrics through the admin client.
func (b *bed) scrape(ctx context.Context) ([]sample, error) {
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics from kube-apiserver: %w", err)
	}
	return parseProm(raw), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ---- CPU time of the processes involved (children of this process) ----

const clockTicks = 100 // USER_HZ on Linux

// cpuTimes returns the CPU time (user+system) of this process and of its
// children by command name (etcd, kube-apiserver), from /proc.
func cpuTimes() map[string]time.Duration {
	out := map[string]time.Duration{}
	self := os.Getpid()
	if d, _, ok := procCPU(self); ok {
		out["bench process (creators + webhook in process + simulator)"] = d
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		d, ppid, ok := procCPU(pid)
		if !ok || ppid != self {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		out[strings.TrimSpace(string(comm))] += d
	}
	return out
}

// procCPU reads utime+stime and the parent of pid.
func procCPU(pid int) (time.Duration, int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0]=state f[1]=ppid ... f[11]=utime f[12]=stime
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks, ppid, true
}

func subCPU(after, before map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// machineCPU reads the machine's busy and total CPU time (all users) from
// /proc/stat, in clock ticks.
func machineCPU() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}
