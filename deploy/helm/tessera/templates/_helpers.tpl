{{/* The image every container runs: the chart's appVersion unless image.tag says otherwise. */}}
{{- define "tessera.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* requests and limits of a container from {cpu, memory} (memory is both request and limit). */}}
{{- define "tessera.resources" -}}
requests:
  cpu: {{ .cpu | quote }}
  memory: {{ .memory | quote }}
limits:
  memory: {{ .memory | quote }}
{{- end }}
