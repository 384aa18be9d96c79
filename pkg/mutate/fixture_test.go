package mutate_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hopsworks/runai-webhook/pkg/admission"
)

var update = flag.Bool("update", false, "rewrite testdata/notebook-review.json from notebookPod")

const fixturePath = "testdata/notebook-review.json"

// notebookPod is a Hopsworks Jupyter pod as the API server hands it to the
// mutating webhooks: three containers (Jupyter with one GPU, a log shipper,
// a certificate refresher), volumes, env, probes, and the fields the API
// server defaults and manages before admission. typ is its workload type.
func notebookPod(typ string) *corev1.Pod {
	q := resource.MustParse
	mounts := []corev1.VolumeMount{
		{Name: "hadoop-conf", MountPath: "/srv/hops/hadoop/etc/hadoop", ReadOnly: true},
		{Name: "certs", MountPath: "/srv/hops/super_crypto/hdfs", ReadOnly: true},
		{Name: "logs", MountPath: "/srv/hops/jupyter/logs"},
		{Name: "project-data", MountPath: "/hopsfs"},
		{Name: "kube-api-access-7x2ql", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
	}
	probe := func(port int32, path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intOrString(port), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: 10, TimeoutSeconds: 5, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 6,
		}
	}
	env := []corev1.EnvVar{
		{Name: "HOPSWORKS_PROJECT_NAME", Value: "team-a"},
		{Name: "HOPSWORKS_PROJECT_ID", Value: "119"},
		{Name: "HOPSWORKS_USER", Value: "meb10000"},
		{Name: "HADOOP_HOME", Value: "/srv/hops/hadoop"},
		{Name: "HADOOP_CONF_DIR", Value: "/srv/hops/hadoop/etc/hadoop"},
		{Name: "REST_ENDPOINT", Value: "https://hopsworks.glassfish.service.consul:8182"},
		{Name: "REQUESTS_VERIFY", Value: "true"},
		{Name: "JUPYTER_PORT", Value: "8888"},
		{Name: "JUPYTER_BASE_URL", Value: "/hopsworks-api/jupyter/8888/"},
		{Name: "SECRETS_DIR", Value: "/srv/hops/secrets"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
		{Name: "PYTHONPATH", Value: "/srv/hops/hopsworks-python:/srv/hops/spark/python"},
		{Name: "SPARK_HOME", Value: "/srv/hops/spark"},
		{Name: "SPARK_CONF_DIR", Value: "/srv/hops/spark/conf"},
		{Name: "HIVE_ENDPOINT", Value: "hive.service.consul:9085"},
		{Name: "HOPSWORKS_DOMAIN", Value: "hopsworks.glassfish.service.consul"},
		{Name: "HOPSWORKS_PUBLIC_HOST", Value: "hopsworks.example.com"},
		{Name: "KAFKA_BROKERS", Value: "broker.kafka.service.consul:9091"},
		{Name: "ELASTIC_ENDPOINT", Value: "elastic.service.consul:9200"},
		{Name: "MATERIAL_DIRECTORY", Value: "/srv/hops/secrets/material"},
		{Name: "CONDA_ENV", Value: "/srv/hops/anaconda/envs/theenv"},
		{Name: "JUPYTER_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "meb10000-jupyter"}, Key: "token"}}},
		{Name: "API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "meb10000-api-key"}, Key: "key"}}},
	}
	defaults := func(c corev1.Container) corev1.Container {
		c.TerminationMessagePath = "/dev/termination-log"
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		c.ImagePullPolicy = corev1.PullIfNotPresent
		return c
	}
	f := false
	uid := int64(1000)
	grace := int64(30)
	mode := int32(420)
	tokenTTL := int64(3607)
	pre := corev1.PreemptLowerPriority
	prio := int32(0)
	links := true
	tol := int64(300)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "jupyter-meb10000-7f9c8d6b5-x2w4k",
			Namespace: "team-a", GenerateName: "jupyter-meb10000-7f9c8d6b5-",
			Labels: map[string]string{
				"hopsworks.ai/workload-type": typ, "app": "jupyter", "project": "team-a", "user": "meb10000",
				"pod-template-hash": "7f9c8d6b5", "deployment": "jupyter-meb10000",
			},
			Annotations: map[string]string{"hopsworks.ai/jupyter-settings-id": "42", "kubectl.kubernetes.io/default-container": "jupyter"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "jupyter-meb10000-7f9c8d6b5",
				UID: "5c1e0f7a-3a43-4c3e-9d8e-1b5f6c7d8e9f", Controller: boolPtr(true), BlockOwnerDeletion: boolPtr(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(
					`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:hopsworks.ai/workload-type":{},"f:project":{},"f:user":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"5c1e0f7a-3a43-4c3e-9d8e-1b5f6c7d8e9f\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"jupyter\"}":{".":{},"f:env":{},"f:image":{},"f:name":{},"f:ports":{},"f:resources":{}}},"f:volumes":{}}}`)}}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				defaults(corev1.Container{
					Name: "jupyter", Image: "docker.hops.works/hopsworks/python311:4.1.0",
					Command: []string{"/bin/bash", "-c"},
					Args:    []string{"jupyter-lab --ip=0.0.0.0 --port=8888 --no-browser --ServerApp.base_url=/hopsworks-api/jupyter/8888/ --ServerApp.token=$(JUPYTER_TOKEN)"},
					Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8888, Protocol: corev1.ProtocolTCP}},
					Env:     env,
					Resources: corev1.ResourceRequirements{
						Limits:   corev1.ResourceList{"cpu": q("4"), "memory": q("16Gi"), "nvidia.com/gpu": q("1")},
						Requests: corev1.ResourceList{"cpu": q("1"), "memory": q("8Gi"), "nvidia.com/gpu": q("1")},
					},
					VolumeMounts:    mounts,
					ReadinessProbe:  probe(8888, "/hopsworks-api/jupyter/8888/api/status"),
					StartupProbe:    probe(8888, "/hopsworks-api/jupyter/8888/api"),
					LivenessProbe:   probe(8888, "/hopsworks-api/jupyter/8888/api"),
					SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, AllowPrivilegeEscalation: &f},
				}),
				defaults(corev1.Container{
					Name: "filebeat", Image: "docker.hops.works/hopsworks/filebeat:8.9.2",
					Args: []string{"-c", "/etc/filebeat.yml", "-e"},
					Env: []corev1.EnvVar{{Name: "LOGPATH", Value: "/srv/hops/jupyter/logs/*.log"}, {Name: "LOGSTASH", Value: "logstash.service.consul:5044"},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
					Resources: corev1.ResourceRequirements{
						Limits: corev1.ResourceList{"cpu": q("200m"), "memory": q("256Mi")}, Requests: corev1.ResourceList{"cpu": q("50m"), "memory": q("128Mi")},
					},
					VolumeMounts: mounts[2:3],
				}),
				defaults(corev1.Container{
					Name: "cert-refresher", Image: "docker.hops.works/hopsworks/cert-refresher:4.1.0",
					Env: []corev1.EnvVar{{Name: "CERTS_DIR", Value: "/srv/hops/super_crypto/hdfs"}, {Name: "REFRESH_INTERVAL", Value: "1h"}},
					Resources: corev1.ResourceRequirements{
						Limits: corev1.ResourceList{"cpu": q("100m"), "memory": q("64Mi")}, Requests: corev1.ResourceList{"cpu": q("10m"), "memory": q("32Mi")},
					},
					VolumeMounts: mounts[1:2],
				}),
			},
			Volumes: []corev1.Volume{
				{Name: "hadoop-conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "hadoop-conf"}, DefaultMode: &mode}}},
				{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "meb10000-certs", DefaultMode: &mode}}},
				{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "project-data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "team-a-data"}}},
				{Name: "kube-api-access-7x2ql", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: &mode, Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &tokenTTL, Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
			DNSPolicy: corev1.DNSClusterFirst, ServiceAccountName: "default", DeprecatedServiceAccount: "default",
			SecurityContext: &corev1.PodSecurityContext{FSGroup: &uid},
			SchedulerName:   "default-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tol},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tol},
			},
			Priority: &prio, EnableServiceLinks: &links, PreemptionPolicy: &pre,
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 50, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "hopsworks.ai/node-role", Operator: corev1.NodeSelectorOpIn, Values: []string{"compute", "gpu"}}}},
			}}}},
		},
	}
}

func boolPtr(b bool) *bool { return &b }

func intOrString(p int32) intstr.IntOrString { return intstr.FromInt32(p) }

// reviewFor wraps pod in the AdmissionReview the API server POSTs for a create.
func reviewFor(t testing.TB, pod *corev1.Pod, uid string, dryRun bool) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	return reviewOf(t, raw, pod.Namespace, uid, dryRun)
}

func reviewOf(t testing.TB, raw []byte, namespace, uid string, dryRun bool) []byte {
	t.Helper()
	podGVK := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podGVR := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	rv := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(uid), Kind: podGVK, Resource: podGVR, RequestKind: &podGVK, RequestResource: &podGVR,
			Namespace: namespace, Operation: admissionv1.Create,
			UserInfo: authnv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller",
				UID: "0b7d1f28-5b6e-4b8e-a2a4-2c5d7f0e9b11", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
			Object:  runtime.RawExtension{Raw: raw},
			DryRun:  &dryRun,
			Options: runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`)},
		},
	}
	b, err := json.Marshal(rv)
	require.NoError(t, err)
	return b
}

// loadFixture returns testdata/notebook-review.json (the inject webhook's
// input for a GPU notebook) compacted, as the API server sends it; the file
// is indented for reading.
func loadFixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(fixturePath)
	require.NoError(t, err, "run go test ./pkg/mutate -run TestNotebookReviewFixture -update")
	var out bytes.Buffer
	require.NoError(t, json.Compact(&out, b))
	return out.Bytes()
}

// TestNotebookReviewFixture keeps testdata/notebook-review.json equal to what
// notebookPod and reviewFor generate (rewrite it with -update), and checks it
// is the realistic size the benchmarks claim (about 8 KiB).
func TestNotebookReviewFixture(t *testing.T) {
	want := reviewFor(t, notebookPod("notebook"), "7d0c4d2e-8f3b-4d53-9d0e-6a1f2b3c4d5e", false)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, want, "", " "))
	pretty.WriteByte('\n')
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(fixturePath), 0o755))
		require.NoError(t, os.WriteFile(fixturePath, pretty.Bytes(), 0o644))
	}
	b, err := os.ReadFile(fixturePath)
	require.NoError(t, err, "run go test ./pkg/mutate -run TestNotebookReviewFixture -update")
	require.Equal(t, pretty.String(), string(b), "fixture is stale: rerun with -update")
	got := loadFixture(t)
	require.InDelta(t, 8<<10, len(got), 1<<10, "the review on the wire should be about 8 KiB, is %d bytes", len(got))
	req, _, err := admission.DecodeReview(got)
	require.NoError(t, err)
	require.Equal(t, "team-a", req.Namespace)
}

// afterPatch is the review the API server sends to the guard: the object
// with the inject webhook's patch applied, under a new request uid.
func afterPatch(t testing.TB, review []byte, ops []admission.PatchOp, uid string) []byte {
	t.Helper()
	req, _, err := admission.DecodeReview(review)
	require.NoError(t, err)
	obj := []byte(req.Object)
	if len(ops) > 0 {
		b, err := json.Marshal(ops)
		require.NoError(t, err)
		patch, err := jsonpatch.DecodePatch(b)
		require.NoError(t, err)
		obj, err = patch.Apply(obj)
		require.NoError(t, err)
	}
	return reviewOf(t, obj, req.Namespace, uid, req.IsDryRun())
}

func resourceOf(s string) resource.Quantity { return resource.MustParse(s) }
