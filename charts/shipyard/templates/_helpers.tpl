{{/* Names and labels shared by the templates. */}}

{{- define "shipyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "shipyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "shipyard.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "shipyard.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "shipyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: stable across upgrades. */}}
{{- define "shipyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shipyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "shipyard.labels" -}}
helm.sh/chart: {{ include "shipyard.chart" . }}
{{ include "shipyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shipyard
{{- end }}

{{- define "shipyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "shipyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespaces served in namespaced mode (the release namespace by default). */}}
{{- define "shipyard.watchNamespaces" -}}
{{- if .Values.watchNamespaces }}
{{- join "," (uniq .Values.watchNamespaces) }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{- define "shipyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* What the operator may do in a namespace it serves. Secrets: create only, for the
     buildkitd client certificate of each build Job (builds.buildkitd.tls); trial pods mount the
     Secrets a Trial names, the operator never reads them. */}}
{{- define "shipyard.namespacedRules" -}}
- apiGroups: [shipyard.dev]
  resources: [tasks, trials, imagebuilds]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [shipyard.dev]
  resources: [sweeps]
  verbs: [get, list, watch, patch, update, delete]
- apiGroups: [shipyard.dev]
  resources: [tasks/status, trials/status, imagebuilds/status, sweeps/status]
  verbs: [get, patch, update]
- apiGroups: [shipyard.dev]
  resources: [warmpools]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [shipyard.dev]
  resources: [warmpools/status]
  verbs: [get, patch, update]
{{- if .Values.warmPods.enabled }}
# Warm pods carry no Secret volume: the operator reads the agent's Secrets at the claim.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  # delete: a foreign runner ConfigMap; list, watch: the runner's deleted are made again
  # (docs/trust.md)
  verbs: [get, list, watch, create, patch, update, delete]
{{- if and (eq .Values.builds.backend "buildkit") .Values.builds.buildkitd.tls.enabled }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
{{- end }}
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, update, patch, delete]
{{- if .Values.kueue.enabled }}
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, list, watch, create, delete]
{{- end }}
{{- if has .Values.networkPolicy.fqdnBackend (list "auto" "gke") }}
- apiGroups: [networking.gke.io]
  resources: [fqdnnetworkpolicies]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
{{- if has .Values.networkPolicy.fqdnBackend (list "auto" "cilium") }}
- apiGroups: [cilium.io]
  resources: [ciliumnetworkpolicies]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
{{- end }}


{{/* "k1=v1,k2=v2" from a map, for SHIPYARD_* environment variables. */}}
{{- define "shipyard.keyValues" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
