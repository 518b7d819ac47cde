{{- define "idem.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "idem.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "idem.labels" -}}
{{ include "idem.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "idem.secretName" -}}
{{- .Values.existingSecret | default (include "idem.fullname" .) -}}
{{- end -}}

{{/* The config file: the values' config with the chart's listen and admin. */}}
{{- define "idem.config" -}}
{{- $c := omit .Values.config "listen" "admin" "admin-token" -}}
{{- $_ := set $c "listen" (printf "0.0.0.0:%v" .Values.ports.proxy) -}}
{{- $_ := set $c "admin" (printf "0.0.0.0:%v" .Values.ports.admin) -}}
{{- toYaml $c -}}
{{- end -}}
