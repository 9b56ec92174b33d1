{{/* Names and labels shared by the templates. */}}
{{- define "wring.fullname" -}}
{{- printf "%s-wring" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wring.eppName" -}}
{{- printf "%s-epp" (include "wring.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wring.selectorLabels" -}}
app.kubernetes.io/name: wring
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: model-server
{{- end -}}

{{- define "wring.labels" -}}
{{ include "wring.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end -}}

{{- define "wring.eppSelectorLabels" -}}
app.kubernetes.io/name: wring-epp
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: endpoint-picker
{{- end -}}

{{/* preStop sleep + drain + slack: SIGTERM must never cut a drain short. */}}
{{- define "wring.terminationGracePeriod" -}}
{{- add .Values.server.preStopSleepSeconds .Values.server.drainTimeoutSeconds .Values.server.terminationSlackSeconds -}}
{{- end -}}
