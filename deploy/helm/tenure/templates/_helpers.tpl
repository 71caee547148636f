{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "tenure.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "tenure.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tenure.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tenure.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenure.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tenure.labels" -}}
helm.sh/chart: {{ include "tenure.chart" . }}
{{ include "tenure.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: lease-service
{{- end }}

{{- define "tenure.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tenure.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tenure.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret with the server certificate and key. */}}
{{- define "tenure.tlsSecret" -}}
{{- if .Values.tls.existingSecret }}
{{- .Values.tls.existingSecret }}
{{- else if and .Values.tls.cert .Values.tls.key }}
{{- printf "%s-tls" (include "tenure.fullname" .) }}
{{- else }}
{{- fail "tls.enabled needs tls.existingSecret, or tls.cert and tls.key" }}
{{- end }}
{{- end }}

{{/* The Secret with the CA for client certificates (mTLS). */}}
{{- define "tenure.clientCASecret" -}}
{{- if .Values.tls.clientCA.existingSecret }}
{{- .Values.tls.clientCA.existingSecret }}
{{- else if .Values.tls.clientCA.ca }}
{{- printf "%s-client-ca" (include "tenure.fullname" .) }}
{{- else }}
{{- fail "tls.clientCA.enabled needs tls.clientCA.existingSecret or tls.clientCA.ca" }}
{{- end }}
{{- end }}

{{/* The Secret with the bearer tokens, or "" when auth has no tokens. */}}
{{- define "tenure.tokensSecret" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if .Values.auth.tokens }}
{{- printf "%s-tokens" (include "tenure.fullname" .) }}
{{- end }}
{{- end }}

{{/* Whether the kubelet can run gRPC probes: not against TLS. */}}
{{- define "tenure.probe" -}}
{{- $p := .probe }}
{{- if $p.override }}
{{- toYaml $p.override }}
{{- else }}
{{- if and (eq $p.type "grpc") (not .root.Values.tls.enabled) }}
grpc:
  port: {{ .root.Values.port }}
  service: ""
{{- else }}
tcpSocket:
  port: grpc
{{- end }}
periodSeconds: {{ $p.periodSeconds }}
failureThreshold: {{ $p.failureThreshold }}
{{- end }}
{{- end }}
