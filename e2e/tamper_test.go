package e2e

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/gpuview"
)

// Tampering and access: what a user can try against the webhook's decisions
// and its API, what the webhook's own service account may do, and which TLS
// its port accepts.

// knownBug reports a product bug this suite found and cannot fix here: the
// test is skipped with the bug in its log, so `make test` stays green while
// it is open, and passes by itself once fixed (the skip is reached only when
// the check fails). E2E_KNOWN_BUGS=fail turns it into a failure.
func knownBug(t *testing.T, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("E2E_KNOWN_BUGS") == "fail" {
		t.Fatalf("KNOWN BUG: %s", msg)
	}
	t.Skipf("KNOWN BUG (E2E_KNOWN_BUGS=fail fails on it): %s", msg)
}

// A user cannot put a pod into another project's queue, off Run:ai's
// scheduler with GPUs, or into Kueue: at creation (bind and guard webhooks)
// and by relabelling it afterwards (UPDATE). As installed (admission
// policies in the API server, webhooks for GPU pods) and as the chart renders
// for clusters without admission policies (webhook.admissionPolicies=false,
// every pod through the webhooks): the same rules, the same messages.
func TestTamperPodLabels(t *testing.T) {
	t.Run("installed", func(t *testing.T) {
		require.Positive(t, env.Policies, "manifests/install.yaml carries the admission policies")
		tamperPodLabels(t, "e2e-tamper", refusedByUs)
	})
	t.Run("webhooks only", func(t *testing.T) {
		data, err := env.RenderChart("webhook.admissionPolicies=false")
		require.NoError(t, err)
		objs, err := framework.DecodeObjects(data)
		require.NoError(t, err)
		ctx := ctxT(t, 60*time.Second)
		require.NoError(t, env.InstallAdmission(ctx, objs))
		require.Zero(t, env.Policies, "the render has no admission policies")
		t.Cleanup(func() {
			installed, err := env.InstallObjects()
			require.NoError(t, err)
			require.NoError(t, env.InstallAdmission(context.Background(), installed))
			waitAdmissionPolicies(t)
		})
		waitAdmissionPolicies(t)
		tamperPodLabels(t, "e2e-tamperwh", func(msg string) bool { return strings.Contains(msg, "denied the request") })
	})
}

var probes int

// waitAdmissionPolicies waits until the API server applies what is installed
// now: a dry-run pod with a foreign queue in a bound namespace is refused by
// the policy when env.Policies > 0, else by the guard webhook.
func waitAdmissionPolicies(t *testing.T) {
	t.Helper()
	probes++
	ns := fmt.Sprintf("e2e-tamper-probe-%d", probes) // an earlier probe's may still be terminating
	boundNamespace(t, ns)
	want := "denied the request"
	if env.Policies > 0 {
		want = "ValidatingAdmissionPolicy"
	}
	var last string
	applied := assert.Eventually(t, func() bool {
		_, stderr, err := env.Kubectl(ctxT(t, 30*time.Second), podYAML(ns, "probe", "job", 0, map[string]string{queueLabel: "someone-else"}, ""), "create", "--dry-run=server", "-f", "-")
		last = stderr
		return err != nil && strings.Contains(stderr, want)
	}, 30*time.Second, 100*time.Millisecond)
	require.True(t, applied, "the API server applies the installed admission (%s); last answer: %s", want, last)
}

func tamperPodLabels(t *testing.T, prefix string, refusedByUs func(string) bool) {
	a, b := prefix+"-a", prefix+"-b"
	boundNamespace(t, a)
	boundNamespace(t, b)
	queueB := getNamespace(t, b).Labels[queueLabel]
	require.Equal(t, b, queueB)

	gpuPod := func(name, extra string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {hopsworks.ai/workload-type: job}
%s`, name, a, extra)
	}
	refused := []struct {
		name, yaml, want string
	}{
		{"queue of another project", podYAML(a, "spoof-b", "job", 0, map[string]string{queueLabel: queueB}, ""),
			"has runai/queue=" + queueB + ", but namespace " + a + " belongs to Run:ai project " + a},
		{"queue of another project on a notebook with GPUs", podYAML(a, "spoof-b-gpu", "notebook", 1, map[string]string{queueLabel: queueB}, ""),
			"belongs to Run:ai project " + a},
		{"empty queue label", podYAML(a, "spoof-empty", "job", 0, map[string]string{queueLabel: ""}, ""), "has runai/queue="},
		{"GPU limits on another scheduler", podYAML(a, "sched-limits", "job", 1, nil, "my-scheduler"), `asks for GPUs with schedulerName "my-scheduler"`},
		{"GPU requests only, another scheduler", gpuPod("sched-requests", `spec:
  schedulerName: my-scheduler
  containers:
  - {name: main, image: registry.invalid/x:1, resources: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}}}
`), `asks for GPUs with schedulerName "my-scheduler"`},
		{"GPU in an init container, another scheduler", gpuPod("sched-init", `spec:
  schedulerName: my-scheduler
  initContainers:
  - {name: init, image: registry.invalid/x:1, resources: {limits: {nvidia.com/gpu: 2}}}
  containers:
  - {name: main, image: registry.invalid/x:1}
`), `asks for GPUs with schedulerName "my-scheduler"`},
		{"GPU in a sidecar, another scheduler", gpuPod("sched-sidecar", `spec:
  schedulerName: my-scheduler
  initContainers:
  - {name: side, image: registry.invalid/x:1, restartPolicy: Always, resources: {limits: {nvidia.com/gpu: 1}}}
  containers:
  - {name: main, image: registry.invalid/x:1}
`), `asks for GPUs with schedulerName "my-scheduler"`},
		{"GPU fraction, another scheduler", `apiVersion: v1
kind: Pod
metadata:
  name: sched-fraction
  namespace: ` + a + `
  labels: {hopsworks.ai/workload-type: notebook}
  annotations: {gpu-fraction: "0.5"}
spec:
  schedulerName: my-scheduler
  containers: [{name: main, image: registry.invalid/x:1}]
`, `asks for GPUs with schedulerName "my-scheduler"`},
		{"Kueue queue label", podYAML(a, "kueue", "job", 0, map[string]string{"kueue.x-k8s.io/queue-name": "lq"}, ""), "carries Kueue's label"},
		{"Kueue label and a correct queue", podYAML(a, "kueue-2", "job", 0, map[string]string{"kueue.x-k8s.io/queue-name": "lq", queueLabel: a}, ""), "carries Kueue's label"},
	}
	for _, tt := range refused {
		t.Run("create/"+tt.name, func(t *testing.T) {
			stderr := kubectlFails(t, tt.yaml, "create", "-f", "-")
			assert.Contains(t, stderr, tt.want)
			assert.True(t, refusedByUs(stderr), "refused by the expected part of our admission: %s", stderr)
		})
	}

	t.Run("create/first pod of an unbound namespace spoofing another queue", func(t *testing.T) {
		c := prefix + "-c"
		unboundNamespace(t, c, "")
		require.NoError(t, env.Sim.SetDown(false))
		stderr := kubectlFails(t, podYAML(c, "spoof", "job", 0, map[string]string{queueLabel: queueB}, ""), "create", "-f", "-")
		assert.Contains(t, stderr, "has runai/queue="+queueB)
		assert.Contains(t, stderr, "bind.runai-webhook.hopsworks.ai", "refused by the bind webhook itself, before any guard")
	})

	// Made right rather than refused: a GPU pod that named the default
	// scheduler (or none) lands on Run:ai's.
	t.Run("create/GPU pod on default-scheduler is moved to runai-scheduler", func(t *testing.T) {
		kubectlOK(t, podYAML(a, "sched-default", "job", 1, nil, "default-scheduler"), "create", "-f", "-")
		p := getPod(t, a, "sched-default")
		assert.Equal(t, "runai-scheduler", p.Spec.SchedulerName)
		assert.Equal(t, a, p.Labels[queueLabel])
	})

	// Relabelling after admission (UPDATE through the guard).
	kubectlOK(t, podYAML(a, "running", "notebook", 1, nil, ""), "create", "-f", "-")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"queue of another project", []string{queueLabel + "=" + queueB, "--overwrite"}, "cannot change after creation"},
		{"queue removed", []string{queueLabel + "-"}, "cannot change after creation"},
		{"Kueue label added", []string{"kueue.x-k8s.io/queue-name=lq"}, "carries Kueue's label"},
	} {
		t.Run("update/"+tt.name, func(t *testing.T) {
			stderr := kubectlFails(t, "", append([]string{"label", "pod", "running", "-n", a}, tt.args...)...)
			assert.Contains(t, stderr, tt.want)
			assert.Equal(t, a, getPod(t, a, "running").Labels[queueLabel])
		})
	}
	t.Run("update/scheduler swapped", func(t *testing.T) {
		stderr := kubectlFails(t, "", "patch", "pod", "running", "-n", a, "--type=json",
			"-p", `[{"op":"replace","path":"/spec/schedulerName","value":"my-scheduler"}]`)
		assert.Contains(t, stderr, "Forbidden", "the API server keeps schedulerName immutable")
		assert.Equal(t, "runai-scheduler", getPod(t, a, "running").Spec.SchedulerName)
	})
	t.Run("update/other labels still change", func(t *testing.T) {
		kubectlOK(t, "", "label", "pod", "running", "-n", a, "team=ml")
	})

	// Beyond nvidia.com/gpu: a MIG slice is a GPU too. Reported, not
	// asserted: which extended resources count as GPUs is a product decision.
	t.Run("create/MIG slice on another scheduler", func(t *testing.T) {
		_, stderr, err := env.Kubectl(ctxT(t, 60*time.Second), gpuPod("sched-mig", `spec:
  schedulerName: my-scheduler
  containers:
  - {name: main, image: registry.invalid/x:1, resources: {limits: {nvidia.com/mig-1g.5gb: 1}}}
`), "create", "-f", "-")
		if err != nil {
			t.Logf("refused: %s", refusal(stderr))
			return
		}
		p := getPod(t, a, "sched-mig")
		knownBug(t, "a pod asking for nvidia.com/mig-1g.5gb with schedulerName my-scheduler was admitted in bound namespace %s (scheduler %q, queue %q): "+
			"only nvidia.com/gpu and the gpu-fraction annotation count as GPUs (pkg/workload GPURequest), so MIG slices escape Run:ai's scheduler and quota", a, p.Spec.SchedulerName, p.Labels[queueLabel])
	})
}

// namespaceEditor provisions a user who may get, list, patch and update
// namespaces, and nothing else (ClusterRole removed at the end).
func namespaceEditor(t *testing.T, name string) string {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ns-editor-" + name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ns-editor-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: name, APIGroup: rbacv1.GroupName}}}
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, role)))
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, binding)))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), role)
	})
	require.Eventually(t, func() bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: name, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Resource: "namespaces"}}}
		return env.Client.Create(context.Background(), sar) == nil && sar.Status.Allowed
	}, 30*time.Second, 100*time.Millisecond, "RBAC lets %s patch namespaces", name)
	kc, err := env.UserKubeconfig(name)
	require.NoError(t, err)
	return kc
}

// A user with namespaces patch rights cannot rebind a namespace: no direct
// change of the binding labels, and no detour through unmanaging it.
func TestTamperNamespaceBindingLabels(t *testing.T) {
	victim, mine := "e2e-tamper-victim", "e2e-tamper-mine"
	boundNamespace(t, victim)
	boundNamespace(t, mine)
	victimNS := getNamespace(t, victim)
	victimQueue, victimID := victimNS.Labels[queueLabel], victimNS.Labels[idLabel]
	mineID := getNamespace(t, mine).Labels[idLabel]
	require.NotEmpty(t, victimID)
	mallory := namespaceEditor(t, "mallory")
	as := func(args ...string) (string, error) {
		_, stderr, err := env.KubectlAs(ctxT(t, 30*time.Second), mallory, "", args...)
		return stderr, err
	}

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"queue and id of another project", []string{"label", "ns", mine, queueLabel + "=" + victimQueue, idLabel + "=" + victimID, "--overwrite"}},
		{"queue only", []string{"label", "ns", mine, queueLabel + "=" + victimQueue, "--overwrite"}},
		{"id only", []string{"label", "ns", mine, idLabel + "=" + victimID, "--overwrite"}},
		{"queue removed", []string{"label", "ns", mine, queueLabel + "-"}},
		{"id removed", []string{"label", "ns", mine, idLabel + "-"}},
		{"merge patch of both", []string{"patch", "ns", mine, "--type=merge", "-p",
			fmt.Sprintf(`{"metadata":{"labels":{%q:%q,%q:%q}}}`, queueLabel, victimQueue, idLabel, victimID)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stderr, err := as(tt.args...)
			require.Error(t, err, "mallory changed the binding labels: %v", tt.args)
			assert.Contains(t, stderr, "user mallory may not")
			assert.Contains(t, stderr, "written only by runai-webhook")
			got := getNamespace(t, mine)
			assert.Equal(t, mine, got.Labels[queueLabel])
			assert.Equal(t, mineID, got.Labels[idLabel])
		})
	}
	t.Run("department label breaking the naming rule", func(t *testing.T) {
		stderr, err := as("label", "ns", mine, deptLabel+"=Research_Team", "--overwrite")
		require.Error(t, err)
		assert.Contains(t, stderr, "breaks the department naming rule")
	})

	// The namespace webhook only sees namespaces whose NEW labels carry
	// hopsworks.ai/project (namespaceSelector). Drop that label and change
	// the queue in the same update, then put the label back: the second
	// update changes no binding label, so it passes too.
	t.Run("detour: unmanage, relabel, manage again", func(t *testing.T) {
		stderr, err := as("label", "ns", mine, projectLabel+"-", queueLabel+"="+victimQueue, idLabel+"="+victimID, "--overwrite")
		if err != nil {
			assert.Contains(t, stderr, "runai-webhook")
			assert.Equal(t, mine, getNamespace(t, mine).Labels[queueLabel])
			return
		}
		step1 := getNamespace(t, mine).Labels
		t.Logf("step 1 admitted: %s unmanaged with %s=%s", mine, queueLabel, step1[queueLabel])
		_, err = as("label", "ns", mine, projectLabel+"="+mine)
		hijacked := err == nil && getNamespace(t, mine).Labels[queueLabel] == victimQueue
		podQueue := ""
		if hijacked {
			t.Logf("step 2 admitted: %s managed again, queued in %s", mine, victimQueue)
			if _, _, err := env.Kubectl(ctxT(t, 60*time.Second), podYAML(mine, "in-their-queue", "notebook", 0, nil, ""), "create", "-f", "-"); err == nil {
				podQueue = getPod(t, mine, "in-their-queue").Labels[queueLabel]
			}
		}
		// The background pass repairs it (the project of the id is bound elsewhere).
		_, perr := env.Controller.Pass(ctxT(t, 60*time.Second))
		after := getNamespace(t, mine).Labels
		t.Logf("after a pass (err %v): %s=%s %s=%s", perr, queueLabel, after[queueLabel], idLabel, after[idLabel])
		// Restore for the cleanup: mallory's labels would make deletion
		// delete the victim's project through the id label.
		if after[queueLabel] == victimQueue || after[idLabel] == victimID {
			kubectlOK(t, "", "label", "ns", mine, queueLabel+"-", idLabel+"-")
		}
		if _, ok := env.Sim.ProjectByName(victim); !ok {
			t.Errorf("the victim's Run:ai project %s is gone", victim)
		}
		if hijacked {
			knownBug(t, "a user with only namespaces patch rights rebound namespace %s to project %s's queue in two updates "+
				"(remove %s and set %s/%s in one update: the namespaces webhook's namespaceSelector requires %s on the new object, so it is not called; "+
				"then add %s back: no binding label changes). A pod created meanwhile was queued in %q. The next background pass repaired it (queue now %q). "+
				"Fix: also match namespaces carrying %s (a second namespaceSelector entry) and refuse removing %s from a bound namespace",
				mine, victimQueue, projectLabel, queueLabel, idLabel, projectLabel, projectLabel, podQueue, after[queueLabel], queueLabel, projectLabel)
		}
	})
}

// expiredCopy re-signs a service-account token with the API server's
// signing key, its validity moved by shift (negative: expired). With
// shift 0 it is the same token, re-signed: the control that the forgery
// itself is accepted.
func expiredCopy(t *testing.T, token string, shift time.Duration) string {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	header, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	var h struct {
		Alg string `json:"alg"`
	}
	require.NoError(t, json.Unmarshal(header, &h))
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	for _, k := range []string{"exp", "iat", "nbf"} {
		if v, ok := claims[k].(float64); ok {
			claims[k] = int64(v) + int64(shift/time.Second)
		}
	}
	payload, err = json.Marshal(claims)
	require.NoError(t, err)
	signing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)
	keyPEM, err := os.ReadFile(filepath.Join(env.APIServerCertDir(), "sa-signer.key"))
	require.NoError(t, err, "the API server's service-account signing key")
	block, _ := pem.Decode(keyPEM)
	require.NotNil(t, block)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		key, err = x509.ParseECPrivateKey(block.Bytes)
	}
	require.NoError(t, err)
	digest := sha256.Sum256([]byte(signing))
	var sig []byte
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		require.Equal(t, "ES256", h.Alg)
		r, s, err := ecdsa.Sign(rand.Reader, k, digest[:])
		require.NoError(t, err)
		size := (k.Curve.Params().BitSize + 7) / 8
		sig = append(pad(r, size), pad(s, size)...)
	case *rsa.PrivateKey:
		require.Equal(t, "RS256", h.Alg)
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:])
		require.NoError(t, err)
	default:
		t.Fatalf("signing key of type %T", key)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func pad(n *big.Int, size int) []byte {
	b := n.Bytes()
	out := make([]byte, size)
	copy(out[size-len(b):], b)
	return out
}

// The GPU view answers only authenticated callers allowed to see the
// namespace: no token, a token of another namespace's user and an expired
// token are refused before anything is read.
func TestTamperGPUViewAccess(t *testing.T) {
	skipWithoutSimulator(t)
	if env.APIServerCertDir() == "" {
		t.Skip("needs the local API server's signing key")
	}
	// The view is another engineer's work in progress: skip clearly if the
	// webhook does not serve it yet.
	seen := false
	for _, p := range []string{gpuview.NamespacePath("default"), gpuview.PathAdmin} {
		if code, _ := viewGET(t, "GET", p, ""); code != http.StatusNotFound {
			seen = true
		}
	}
	if !seen {
		t.Skip("the webhook answers 404 on every view path: the GPU view API is not served yet")
	}
	a, b := "e2e-tamper-view-a", "e2e-tamper-view-b"
	boundNamespace(t, a)
	boundNamespace(t, b)
	waitAggregated(t)
	viewer := saSubject(a, "viewer")
	bindView(t, a, viewer)
	token := serviceAccountToken(t, a, viewer.Name)
	waitAllowed(t, viewer, a, gpuview.ResourceGPUAvailability)

	code, body := viewGET(t, "GET", gpuview.NamespacePath(a), token)
	require.Equal(t, http.StatusOK, code, "control: the viewer sees its namespace: %s", body)
	code, body = viewGET(t, "GET", gpuview.NamespacePath(a), expiredCopy(t, token, 0))
	require.Equal(t, http.StatusOK, code, "control: the token re-signed unchanged is accepted: %s", body)

	for _, tt := range []struct {
		name, path, token string
		want              int
	}{
		{"no token", gpuview.NamespacePath(a), "", http.StatusUnauthorized},
		{"malformed bearer", gpuview.NamespacePath(a), "a.b.c", http.StatusUnauthorized},
		{"expired token (1h ago)", gpuview.NamespacePath(a), expiredCopy(t, token, -2*time.Hour), http.StatusUnauthorized},
		{"another namespace's token", gpuview.NamespacePath(b), token, http.StatusForbidden},
		{"admin view with a namespace token", gpuview.PathAdmin, token, http.StatusForbidden},
		{"path traversal to another namespace", "/api/v1/namespaces/" + a + "/../" + b + "/gpu", token, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := viewGET(t, "GET", tt.path, tt.token)
			if tt.name == "path traversal to another namespace" && code == http.StatusMovedPermanently {
				return // the mux cleans the path with a redirect; nothing was served
			}
			require.Equal(t, tt.want, code, string(body))
			var eb gpuview.ErrorBody
			require.NoError(t, json.Unmarshal(body, &eb), string(body))
			assert.Equal(t, tt.want, eb.Code)
			assert.NotContains(t, string(body), `"deserved"`, "no view data in a refusal")
			if tt.want == http.StatusForbidden {
				assert.NotContains(t, eb.Message, "does not exist", "a refusal never says whether the namespace exists")
			}
		})
	}
}

// The webhook's service account may do exactly what the code needs, asked
// of the API server's authorizer (SubjectAccessReview) with the chart's
// RBAC installed.
func TestRBACWebhookServiceAccount(t *testing.T) {
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + framework.ReleaseNamespace, "system:authenticated"}
	type check struct {
		verb, group, resource, ns, name string
	}
	can := func(c check) (bool, string) {
		res, sub, _ := strings.Cut(c.resource, "/")
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: framework.WebhookUser, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: res, Subresource: sub, Namespace: c.ns, Name: c.name},
		}}
		require.NoError(t, env.Client.Create(ctxT(t, 30*time.Second), sar))
		return sar.Status.Allowed, sar.Status.Reason
	}
	allowed := []check{
		{"get", "", "namespaces", "", ""}, {"list", "", "namespaces", "", ""}, {"watch", "", "namespaces", "", ""}, {"patch", "", "namespaces", "", ""},
		{"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""},
		{"create", "", "events", "default", ""},
		// Run:ai's own admission Deployments, watched by name only (runaiwatch).
		{"get", "apps", "deployments", "runai", "runai-admission-controller"}, {"get", "apps", "deployments", "runai", "admission"},
		{"create", "authentication.k8s.io", "tokenreviews", "", ""}, {"create", "authorization.k8s.io", "subjectaccessreviews", "", ""},
		{"get", "coordination.k8s.io", "leases", framework.ReleaseNamespace, ""},
		{"create", "coordination.k8s.io", "leases", framework.ReleaseNamespace, ""},
		{"update", "coordination.k8s.io", "leases", framework.ReleaseNamespace, ""},
	}
	denied := []check{
		{"get", "", "secrets", "", ""}, {"list", "", "secrets", "", ""}, {"watch", "", "secrets", "", ""},
		{"get", "", "secrets", "default", ""}, {"list", "", "secrets", "default", ""},
		{"get", "", "secrets", framework.ReleaseNamespace, ""}, // cert-manager mode: not even its own
		{"create", "", "pods", "default", ""}, {"update", "", "pods", "default", ""}, {"patch", "", "pods", "default", ""},
		{"delete", "", "pods", "default", ""}, {"get", "", "pods", "default", ""}, {"create", "", "pods/exec", "default", ""},
		{"create", "", "namespaces", "", ""}, {"update", "", "namespaces", "", ""}, {"delete", "", "namespaces", "", ""},
		{"update", "apps", "deployments", "default", ""}, {"patch", "apps", "deployments", framework.ReleaseNamespace, ""},
		{"update", "apps", "deployments", "runai", "runai-admission-controller"},
		{"get", "apps", "deployments", "runai", "some-other-deployment"}, {"list", "apps", "deployments", "runai", ""},
		{"create", "", "serviceaccounts/token", framework.ReleaseNamespace, ""},
		{"get", "coordination.k8s.io", "leases", "default", ""}, {"delete", "coordination.k8s.io", "leases", framework.ReleaseNamespace, ""},
		{"update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", ""},
		{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", ""},
		{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""}, {"bind", "rbac.authorization.k8s.io", "clusterroles", "", ""},
		{"impersonate", "", "users", "", ""},
		{"*", "*", "*", "", ""},
	}
	where := func(c check) string {
		g := c.group
		if g == "" {
			g = "core"
		}
		ns := c.ns
		if ns == "" {
			ns = "cluster-wide"
		}
		if c.name != "" {
			return fmt.Sprintf("%s %s/%s %s (%s)", c.verb, g, c.resource, c.name, ns)
		}
		return fmt.Sprintf("%s %s/%s (%s)", c.verb, g, c.resource, ns)
	}
	for _, c := range allowed {
		ok, reason := can(c)
		assert.True(t, ok, "%s must be allowed (the code uses it): %s", where(c), reason)
		t.Logf("rbac: allowed %-60s %v", where(c), ok)
	}
	for _, c := range denied {
		ok, reason := can(c)
		assert.False(t, ok, "%s must be denied: %s", where(c), reason)
		t.Logf("rbac: denied  %-60s %v", where(c), !ok)
	}

	// Exactly: the chart's ClusterRole and Role hold no rule beyond the
	// allowed list (events may also be patched: the recorder aggregates).
	want := map[string]bool{}
	for _, c := range allowed {
		want[c.group+"/"+c.resource+"/"+c.verb] = true
	}
	var role rbacv1.ClusterRole
	require.NoError(t, env.Client.Get(ctxT(t, 30*time.Second), client.ObjectKey{Name: framework.ReleaseName}, &role))
	var nsRole rbacv1.Role
	require.NoError(t, env.Client.Get(ctxT(t, 30*time.Second), client.ObjectKey{Namespace: framework.ReleaseNamespace, Name: framework.ReleaseName}, &nsRole))
	for kind, rules := range map[string][]rbacv1.PolicyRule{"ClusterRole": role.Rules, "Role": nsRole.Rules} {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if v == "patch" && res == "events" {
							continue
						}
						assert.True(t, want[g+"/"+res+"/"+v], "%s %s grants %s on %s/%s, which the code does not use", kind, framework.ReleaseName, v, g, res)
					}
				}
			}
		}
	}
}

// The webhook's HTTPS port speaks TLS 1.2 with forward-secret AEAD suites
// and TLS 1.3, nothing older or weaker.
func TestTLSWebhookPort(t *testing.T) {
	u, err := url.Parse(env.WebhookURL)
	require.NoError(t, err)
	ca, err := os.ReadFile(filepath.Join(env.CertDir, "ca.crt"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	dial := func(addr string, c *tls.Config) (*tls.ConnectionState, error) {
		c.RootCAs = pool
		c.ServerName = "127.0.0.1"
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, c)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		st := conn.ConnectionState()
		return &st, nil
	}
	// A permissive server with the same certificate: the control that the
	// weak configurations below are refused by the webhook's policy, not by
	// this client or the certificate's key type.
	cert, err := tls.LoadX509KeyPair(filepath.Join(env.CertDir, "tls.crt"), filepath.Join(env.CertDir, "tls.key"))
	require.NoError(t, err)
	permissive := httptest.NewUnstartedServer(http.NotFoundHandler())
	permissive.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS10,
		CipherSuites: cipherIDs(append(tls.CipherSuites(), tls.InsecureCipherSuites()...))}
	permissive.StartTLS()
	defer permissive.Close()
	permissiveAddr := strings.TrimPrefix(permissive.URL, "https://")

	weak := []struct {
		name string
		cfg  func() *tls.Config
		// control: the permissive server accepts it (false when no
		// server with this certificate could).
		control bool
	}{
		{"TLS 1.1", func() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11} }, true},
		{"TLS 1.0", func() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS10} }, true},
		{"TLS 1.2 TLS_RSA_WITH_AES_128_CBC_SHA", func() *tls.Config {
			return &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA}}
		}, false}, // RSA key exchange needs an RSA key: the ECDSA certificate excludes it anyway
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", func() *tls.Config {
			return &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}
		}, true},
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", func() *tls.Config {
			return &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}}
		}, true},
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", func() *tls.Config {
			return &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_RC4_128_SHA}}
		}, true},
	}
	for _, tt := range weak {
		t.Run("refused/"+tt.name, func(t *testing.T) {
			_, err := dial(u.Host, tt.cfg())
			require.Error(t, err, "the webhook accepted %s", tt.name)
			t.Logf("tls: %-48s refused: %v", tt.name, err)
			if tt.control {
				_, cerr := dial(permissiveAddr, tt.cfg())
				assert.NoError(t, cerr, "control: a permissive server with the same certificate accepts %s", tt.name)
			}
		})
	}
	for _, tt := range []struct {
		name string
		cfg  *tls.Config
		want uint16
	}{
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}, tls.VersionTLS12},
		{"TLS 1.2 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}}, tls.VersionTLS12},
		{"TLS 1.3", &tls.Config{MinVersion: tls.VersionTLS13}, tls.VersionTLS13},
	} {
		t.Run("accepted/"+tt.name, func(t *testing.T) {
			st, err := dial(u.Host, tt.cfg)
			require.NoError(t, err)
			assert.Equal(t, tt.want, st.Version)
			t.Logf("tls: %-48s accepted: %s %s", tt.name, tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite))
		})
	}
}

func cipherIDs(cs []*tls.CipherSuite) []uint16 {
	out := make([]uint16, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}
