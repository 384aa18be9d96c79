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
