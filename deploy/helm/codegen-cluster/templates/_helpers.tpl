{{- define "codegen.name" -}}{{ .Release.Name }}-codegen{{- end -}}

{{- define "codegen.labels" -}}
app.kubernetes.io/name: codegen-cluster
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "codegen.selector" -}}
app.kubernetes.io/name: codegen-cluster
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "codegen.image" -}}
{{- if not .Values.image.tag -}}{{- fail "image.tag is required: the tag deploy/images/build printed" -}}{{- end -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "codegen.secretName" -}}
{{- default (printf "%s-secrets" (include "codegen.name" .)) .Values.existingSecret -}}
{{- end -}}

{{/* Environment shared by every codegen process: the config file and the secrets. */}}
{{- define "codegen.env" -}}
- name: CODEGEN_CONFIG
  value: /etc/codegen/codegen.toml
- name: CODEGEN__LOG__FORMAT
  value: json
{{- if or .Values.existingSecret .Values.secrets.brokerUrl }}
- name: CODEGEN__BROKER__URL
  valueFrom: {secretKeyRef: {name: {{ include "codegen.secretName" . }}, key: brokerUrl, optional: true}}
{{- end }}
{{- if or .Values.existingSecret .Values.secrets.redisUrl }}
- name: CODEGEN__STORE__URL
  valueFrom: {secretKeyRef: {name: {{ include "codegen.secretName" . }}, key: redisUrl, optional: true}}
{{- end }}
{{- end -}}
