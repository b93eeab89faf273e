{{/* Chart name, overridable with nameOverride. */}}
{{- define "nftproxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: fullnameOverride, else "<release>" when the release name already
contains the chart name, else "<release>-<chart>". Truncated to 63 characters (label value limit);
the metrics Service appends "-metrics", so that one is cut to 55 first.
*/}}
{{- define "nftproxy.fullname" -}}
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

{{- define "nftproxy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "nftproxy.labels" -}}
helm.sh/chart: {{ include "nftproxy.chart" . }}
{{ include "nftproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: service-proxy
app.kubernetes.io/part-of: nftproxy
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods (immutable in a DaemonSet: never change them). */}}
{{- define "nftproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nftproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "nftproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nftproxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The metrics Service's name (the ServiceMonitor's targets get it as their `service` label). */}}
{{- define "nftproxy.metricsServiceName" -}}
{{- include "nftproxy.fullname" . | trunc 55 | trimSuffix "-" }}-metrics
{{- end }}

{{- define "nftproxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* HOST:PORT, with an IPv6 host in brackets: include "nftproxy.hostPort" (list ip port) */}}
{{- define "nftproxy.hostPort" -}}
{{- $ip := index . 0 }}
{{- $port := index . 1 }}
{{- if contains ":" $ip }}
{{- printf "[%s]:%d" $ip (int $port) }}
{{- else }}
{{- printf "%s:%d" $ip (int $port) }}
{{- end }}
{{- end }}

{{/* True when IP is an unspecified (wildcard) address. */}}
{{- define "nftproxy.isWildcard" -}}
{{- if or (eq . "0.0.0.0") (eq . "::") }}true{{ end }}
{{- end }}

{{/* featureGates (gate: bool) as kube-proxy's --feature-gates: "A=true,B=false", sorted by name. */}}
{{- define "nftproxy.featureGates" -}}
{{- $out := list -}}
{{- range $gate, $on := . -}}
{{- $out = append $out (printf "%s=%t" $gate $on) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}
