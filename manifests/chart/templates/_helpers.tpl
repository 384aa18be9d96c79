{{- define "runai-webhook.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "runai-webhook.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "runai-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "runai-webhook.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "runai-webhook.fullname" . }}
{{- end -}}

{{/* Kueue and Run:ai are mutually exclusive (Hopsworks: the install fails). */}}
{{- define "runai-webhook.checkExclusive" -}}
{{- $kueue := or .Values.variables.kueue_installed (dig "_hopsworks" "kueue" "enabled" false .Values.global) -}}
{{- if and .Values.variables.run_ai_enable $kueue -}}
{{- fail "run_ai_enable and Kueue (variables.kueue_installed or global._hopsworks.kueue.enabled) are both on: Kueue and Run:ai are mutually exclusive; turn one off" -}}
{{- end -}}
{{- end -}}

{{/* The namespace selector terms every webhook shares: managed, not excluded. */}}
{{- define "runai-webhook.nsExclusions" -}}
- key: {{ .Values.webhook.projectLabel }}
  operator: Exists
{{ include "runai-webhook.nameExclusions" . }}
{{- end -}}

{{/* System namespaces, Run:ai's and our own are never sent to the webhooks. */}}
{{- define "runai-webhook.nameExclusions" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
  {{- range (append .Values.webhook.excludedNamespaces .Release.Namespace) }}
  - {{ . }}
  {{- end }}
{{- end -}}

{{- define "runai-webhook.caInjection" -}}
{{- if .Values.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "runai-webhook.fullname" . }}-serving
{{- end }}
{{- end -}}

{{- define "runai-webhook.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "runai-webhook.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
{{- end -}}

{{/*
"true" when the label rules run as in-process admission policies (rendered
only with the integration on): webhook.admissionPolicies true, or auto and
the API server serves MutatingAdmissionPolicy (Kubernetes >= 1.36).
*/}}
{{- define "runai-webhook.policiesOn" -}}
{{- $mode := .Values.webhook.admissionPolicies -}}
{{- $served := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
{{- if and .Values.variables.run_ai_enable (or (eq (toString $mode) "true") (and (eq (toString $mode) "auto") $served)) -}}
true
{{- end -}}
{{- end -}}

{{/*
CEL that is true for a pod that may ask for GPUs: an nvidia.com/ resource
(whole GPUs, MIG slices) in any container or init container, or a gpu-*
annotation (fractions, GPU memory). A superset of what the webhooks count
as GPUs (pkg/workload): only such pods can meet the scheduler rule, the
quota or the reservation, so the others never leave the API server.
*/}}
{{- define "runai-webhook.mayAskForGPUsCEL" -}}
{{- $gpuRes := "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('nvidia.com/'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('nvidia.com/'))))" -}}
(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('gpu-'))) || object.spec.containers.exists(c, {{ $gpuRes }}) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, {{ $gpuRes }}))
{{- end -}}

{{/*
CEL that is true for a pod Run:ai may not preempt: a superset of
pkg/workload's NonPreemptible (label values are ASCII, so lowerAscii is
Go's ToLower on them; they hold no spaces to trim).
*/}}
{{- define "runai-webhook.mayBeNonPreemptibleCEL" -}}
has(object.metadata.labels) && (object.metadata.labels[?'hopsworks.ai/workload-type'].orValue('').lowerAscii() in ['notebook', 'terminal', 'app', 'deployment'] || object.metadata.labels[?'kai.scheduler/preemptibility'].orValue('') == 'non-preemptible')
{{- end -}}

{{/*
When the inject webhook is needed with the admission policies: only to tag
the quota reservation of a non-preemptible pod that asks for GPUs. The
cheap label test comes first, so most pods are decided on it.
*/}}
{{- define "runai-webhook.injectWebhookCEL" -}}
({{ include "runai-webhook.mayBeNonPreemptibleCEL" . }}) && ({{ include "runai-webhook.mayAskForGPUsCEL" . }})
{{- end -}}

{{/*
When the guard webhook is needed with the admission policies: a GPU pod
that is not on the Run:ai scheduler (the scheduler rule) or may be
non-preemptible (the quota). A preemptible pod on the Run:ai scheduler
needs neither, whatever it asks for.
*/}}
{{- define "runai-webhook.guardWebhookCEL" -}}
(object.spec.?schedulerName.orValue('') != {{ .Values.webhook.schedulerName | squote }} || {{ include "runai-webhook.mayBeNonPreemptibleCEL" . }}) && ({{ include "runai-webhook.mayAskForGPUsCEL" . }})
{{- end -}}

{{/* The namespace selector of the pod webhooks and policies: managed, bound. */}}
{{- define "runai-webhook.boundNamespaces" -}}
namespaceSelector:
  matchExpressions:
  {{- include "runai-webhook.nsExclusions" . | nindent 2 }}
  - key: {{ .Values.webhook.queueLabelKey }}
    operator: Exists
{{- end -}}

{{/*
CEL for the namespace webhooks: not the webhook's own write (binding labels,
finalizer), unless it changes the department (a move must still happen).
The webhook's own writes are what the namespace guard always allows, so
calling it for them is a round trip per bind for nothing.
*/}}
{{- define "runai-webhook.notOwnWriteCEL" -}}
request.userInfo.username != {{ include "runai-webhook.serviceAccountUser" . | squote }} || (request.operation == 'UPDATE' && object.metadata.?labels[?{{ .Values.webhook.departmentLabel | squote }}].orValue('') != oldObject.metadata.?labels[?{{ .Values.webhook.departmentLabel | squote }}].orValue(''))
{{- end -}}
