{{/* The release's full name, a DNS label: "probed", or "<release>-probed". */}}
{{- define "probed.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "probed.serviceAccountName" -}}
{{- default (include "probed.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "probed.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The DaemonSet's selector: stable across upgrades. */}}
{{- define "probed.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* The offload webhook's selector (its Deployment, PodDisruptionBudget and Service). */}}
{{- define "probed.webhookSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "probed.evict" -}}
{{- if eq .Values.livenessAction "evict" -}}true{{- end -}}
{{- end -}}

{{- define "probed.restart" -}}
{{- if eq .Values.livenessAction "restart" -}}true{{- end -}}
{{- end -}}
