{{/* The chart's name, or nameOverride. */}}
{{- define "kuberl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name, plus the chart's name unless the release name
already holds it. Truncated so that "<fullname>-operator" stays a valid DNS label.
*/}}
{{- define "kuberl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart label: name-version */}}
{{- define "kuberl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select one component's pods; include with (dict "root" $ "component" "api"). */}}
{{- define "kuberl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kuberl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Every object's labels; include with (dict "root" $ "component" "operator"). The component is
optional (objects of the whole release have none).
*/}}
{{- define "kuberl.labels" -}}
helm.sh/chart: {{ include "kuberl.chart" .root }}
app.kubernetes.io/name: {{ include "kuberl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: kuberl
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The operator's ServiceAccount (rbac.yaml binds its roles to this name). */}}
{{- define "kuberl.operator.serviceAccountName" -}}
{{- printf "%s-operator" (include "kuberl.fullname" .) }}
{{- end }}

{{/* The API's ServiceAccount (rbac.yaml binds its roles to this name). */}}
{{- define "kuberl.api.serviceAccountName" -}}
{{- printf "%s-api" (include "kuberl.fullname" .) }}
{{- end }}

{{/* The Secret holding the key of the jobs' Ray auth tokens: the user's, or the chart's own. */}}
{{- define "kuberl.rayAuthKeySecretName" -}}
{{- .Values.operator.rayAuthKey.existingSecret | default (printf "%s-ray-auth-key" (include "kuberl.fullname" .)) }}
{{- end }}

{{/* The Secret holding the token the API presents to the operator's log relay. */}}
{{- define "kuberl.logRelaySecretName" -}}
{{- .Values.operator.logRelay.existingSecret | default (printf "%s-log-relay" (include "kuberl.fullname" .)) }}
{{- end }}

{{/* Whether the operator serves the log relay (and the API reads drivers' output through it). */}}
{{- define "kuberl.logRelay" -}}
{{- if and .Values.operator.enabled .Values.operator.logRelay.port }}true{{ end }}
{{- end }}

{{/* The kubernetes.io/tls Secret of the operator's admission webhook (cert-manager's or the chart's). */}}
{{- define "kuberl.webhookSecretName" -}}
{{- printf "%s-operator-webhook-tls" (include "kuberl.fullname" .) }}
{{- end }}

{{/* An image reference from {repository, tag}; the tag defaults to the chart's appVersion. */}}
{{- define "kuberl.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}

{{/*
Whether the Prometheus Operator's objects are rendered: monitoring on, and either its CRDs listed
by the cluster or monitoring.forceCreate. Gives "true" or "".
*/}}
{{- define "kuberl.prometheusOperator" -}}
{{- if and .Values.monitoring.enabled (or .Values.monitoring.forceCreate (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
true
{{- end }}
{{- end }}

{{/* imagePullSecrets of a pod spec. */}}
{{- define "kuberl.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The pod's security context: a fixed non-root user, RuntimeDefault seccomp. */}}
{{- define "kuberl.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.podSecurity.runAsUser }}
  runAsGroup: {{ .Values.podSecurity.runAsGroup }}
  fsGroup: {{ .Values.podSecurity.runAsGroup }}
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/* The container's security context: nothing to escalate to, nothing to write but /tmp. */}}
{{- define "kuberl.containerSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.podSecurity.runAsUser }}
  runAsGroup: {{ .Values.podSecurity.runAsGroup }}
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  privileged: false
  capabilities:
    drop:
      - ALL
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/*
Scheduling of a component's pods; include with the component's values (.Values.operator or
.Values.api).
*/}}
{{- define "kuberl.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A label map as key=value,key=value (sorted by key), as `kubectl -l` writes labels. */}}
{{- define "kuberl.labelList" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
