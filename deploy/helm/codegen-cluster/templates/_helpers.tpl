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

{{/* Pod-spec fields every component takes the same way: the pull secrets and the scheduling
of one component's values. A spread constraint without a labelSelector gets the component's
pod labels, since one that selects nothing spreads nothing. */}}
{{- define "codegen.podScheduling" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
{{- $selector := include "codegen.selector" $root | fromYaml -}}
{{- $_ := set $selector "app.kubernetes.io/component" $.component -}}
{{- $constraints := list -}}
{{- range . }}
{{- $c := deepCopy . -}}
{{- if not $c.labelSelector -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $selector) -}}
{{- end -}}
{{- $constraints = append $constraints $c -}}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- end -}}

