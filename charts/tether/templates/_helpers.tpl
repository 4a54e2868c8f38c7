{{/* The chart's name, or nameOverride: the app.kubernetes.io/name label
and part of the object names. */}}
{{- define "tether.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Base name of the release's objects: fullnameOverride; else the release
name, unless it does not contain the name, in which case "<release>-<name>". */}}
{{- define "tether.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tether.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tether.injector" -}}{{ include "tether.fullname" . }}-injector{{- end -}}
{{- define "tether.sidecarRole" -}}{{ include "tether.fullname" . }}-sidecar{{- end -}}
{{- define "tether.modelServerRole" -}}{{ include "tether.fullname" . }}-sidecar-modelservers{{- end -}}
{{- define "tether.tlsSecret" -}}{{ include "tether.injector" . }}-tls{{- end -}}
{{- define "tether.test" -}}{{ include "tether.fullname" . }}-test{{- end -}}

{{- define "tether.labels" -}}
app.kubernetes.io/name: {{ include "tether.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tether.injectorSelector" -}}
app.kubernetes.io/name: {{ include "tether.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: injector
{{- end -}}

{{- define "tether.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Namespaces no webhook entry ever sends to the injector. */}}
{{- define "tether.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace -}}
{{- range .Values.webhook.excludedNamespaces }}{{ $ns = append $ns . }}{{ end -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{/* Fields both webhook entries share. */}}
{{- define "tether.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ .Values.webhook.failurePolicy }}
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
# Called again if a later webhook changes the pod; the injector returns an
# injected pod unchanged (tether.dev/status).
reinvocationPolicy: IfNeeded
matchPolicy: Equivalent
rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
    scope: Namespaced
{{- end -}}

{{/* The sidecar's default gossip port (injector/inject.GossipPort; a chart
test keeps them equal). */}}
{{- define "tether.gossipPort" -}}17946{{- end -}}

{{/* The name of the sidecar's admin container port, where it serves
/metrics (injector/inject.AdminPortName; a chart test keeps them equal).
It keeps its name when tether.dev/admin-port moves the port. */}}
{{- define "tether.adminPortName" -}}tether-admin{{- end -}}
