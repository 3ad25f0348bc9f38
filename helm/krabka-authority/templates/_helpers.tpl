{{/* The chart name. */}}
{{- define "krabka-authority.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's resources (at most 63 characters). */}}
{{- define "krabka-authority.fullname" -}}
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

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "krabka-authority.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "krabka-authority.labels" -}}
helm.sh/chart: {{ include "krabka-authority.chart" . }}
{{ include "krabka-authority.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: krabka
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "krabka-authority.selectorLabels" -}}
app.kubernetes.io/name: {{ include "krabka-authority.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "krabka-authority.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "krabka-authority.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "krabka-authority.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
KRABKA_LISTEN: listenAddress:containerPort, an IPv6 host in brackets.
*/}}
{{- define "krabka-authority.listen" -}}
{{- $host := .Values.config.listenAddress }}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) }}
{{- $host = printf "[%s]" $host }}
{{- end }}
{{- printf "%s:%d" $host (int .Values.containerPort) }}
{{- end }}

{{/*
Whole seconds (rounded down) of a duration such as 10s, 1m30s or 500ms.
Sprig has no duration parser, so the duration is added to a fixed instant
with mustDateModify (Go's time.ParseDuration) and the instants subtracted;
a duration Go cannot read fails the render.
*/}}
{{- define "krabka-authority.durationSeconds" -}}
{{- $base := toDate "2006-01-02" "2000-01-01" }}
{{- $end := mustDateModify (toString .) $base }}
{{- sub ($end | unixEpoch | int64) ($base | unixEpoch | int64) }}
{{- end }}

{{/* terminationGracePeriodSeconds: the shutdown delay and the drain timeout plus a margin. */}}
{{- define "krabka-authority.terminationGracePeriodSeconds" -}}
{{- $delay := include "krabka-authority.durationSeconds" .Values.config.shutdownDelay | int64 }}
{{- $drain := include "krabka-authority.durationSeconds" .Values.config.drainTimeout | int64 }}
{{- add $delay $drain (int64 .Values.terminationGracePeriodExtraSeconds) }}
{{- end }}
