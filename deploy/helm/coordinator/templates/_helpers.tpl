{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "coordinator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The full name with a suffix, still at most 63 characters. Arguments:
(list . suffix).
*/}}
{{- define "coordinator.suffixed" -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "coordinator.fullname" (index . 0) | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{/* The housekeeper's name: the full name, with -housekeeper. */}}
{{- define "coordinator.housekeeper.fullname" -}}
{{- include "coordinator.suffixed" (list . "housekeeper") -}}
{{- end -}}

{{- define "coordinator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "coordinator.labels" -}}
app.kubernetes.io/name: {{ include "coordinator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "coordinator.metaLabels" . }}
{{- end -}}

{{/* The labels of coordinator.labels that no selector uses, for pods. */}}
{{- define "coordinator.metaLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: coordinator
{{- end -}}

{{/* Selector labels of the coordinator's pods. */}}
{{- define "coordinator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "coordinator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end -}}

{{/* Selector labels of the housekeeper's pods. */}}
{{- define "coordinator.housekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "coordinator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: housekeeper
{{- end -}}

{{- define "coordinator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "coordinator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "coordinator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding the access file: the chart's, or the user's. */}}
{{- define "coordinator.accessSecret" -}}
{{- if .Values.auth.accessFile.existingSecret -}}
{{- .Values.auth.accessFile.existingSecret -}}
{{- else -}}
{{- include "coordinator.suffixed" (list . "access") -}}
{{- end -}}
{{- end -}}

{{- define "coordinator.hasAccessFile" -}}
{{- if or .Values.auth.accessFile.rules .Values.auth.accessFile.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* Checks of the values that no schema expresses. */}}
{{- define "coordinator.validate" -}}
{{- if not (has .Values.store.kind (list "redis" "memory")) -}}
{{- fail (printf "store.kind: %q is neither redis nor memory" .Values.store.kind) -}}
{{- end -}}
{{- if and (eq .Values.store.kind "memory") (ne (int .Values.replicaCount) 1) -}}
{{- fail "store.kind=memory keeps the leases in one process: set replicaCount=1 (or use the Redis store)" -}}
{{- end -}}
{{- if and (eq .Values.store.kind "redis") (not .Values.store.redis.existingSecret) -}}
{{- fail "store.redis.existingSecret: name the Secret holding the Redis URL" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) -}}
{{- fail "tls.existingSecret: name the kubernetes.io/tls Secret of the coordinator's certificate" -}}
{{- end -}}
{{- if and .Values.auth.accessFile.rules .Values.auth.accessFile.existingSecret -}}
{{- fail "auth.accessFile: set rules or existingSecret, not both" -}}
{{- end -}}
{{- if not (has .Values.podAntiAffinity (list "soft" "hard" "none")) -}}
{{- fail (printf "podAntiAffinity: %q is none of soft, hard, none" .Values.podAntiAffinity) -}}
{{- end -}}
{{- if .Values.tracing.enabled -}}
{{- if not .Values.tracing.endpoint -}}
{{- fail "tracing.endpoint: name the collector's OTLP endpoint (http://HOST:4317 for grpc, http://HOST:4318 for http/protobuf)" -}}
{{- end -}}
{{- if not (has .Values.tracing.protocol (list "grpc" "http/protobuf")) -}}
{{- fail (printf "tracing.protocol: %q is neither grpc nor http/protobuf" .Values.tracing.protocol) -}}
{{- end -}}
{{- end -}}
{{- if .Values.housekeeper.enabled -}}
{{- if not .Values.housekeeper.redis.existingSecret -}}
{{- fail "housekeeper.redis.existingSecret: name the Secret holding Deckard's Redis URL" -}}
{{- end -}}
{{- if not (has .Values.housekeeper.podAntiAffinity (list "soft" "hard" "none")) -}}
{{- fail (printf "housekeeper.podAntiAffinity: %q is none of soft, hard, none" .Values.housekeeper.podAntiAffinity) -}}
{{- end -}}
{{- if and .Values.housekeeper.coordinatorToken.existingSecret (not .Values.tls.enabled) (not .Values.housekeeper.coordinatorToken.insecure) -}}
{{- fail "housekeeper.coordinatorToken: it is sent over TLS only (tls.enabled); set housekeeper.coordinatorToken.insecure=true to send it in plaintext" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Pod anti-affinity for the pods of the given selector labels: soft prefers
other nodes, hard requires them. Arguments: (list mode selectorLabels).
*/}}
{{- define "coordinator.antiAffinity" -}}
{{- $mode := index . 0 -}}
{{- $labels := index . 1 -}}
{{- if eq $mode "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- $labels | nindent 12 }}
{{- else if eq $mode "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- $labels | nindent 10 }}
{{- end -}}
{{- end -}}

{{/*
The OTEL_* variables of tracing.* (docs/operations.md: Tracing), for the coordinator's
and the housekeeper's containers: the exporter, the sampler, the headers
from a Secret, and the pod, namespace and Deployment in the spans' resource
(k8s.* attributes; K8S_POD_NAME comes first so that Kubernetes expands it).
Arguments: (list . deploymentName).
*/}}
{{- define "coordinator.tracingEnv" -}}
{{- $ := index . 0 -}}
{{- $deployment := index . 1 -}}
{{- with $.Values.tracing -}}
{{- if .enabled }}
- name: OTEL_TRACES_EXPORTER
  value: otlp
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .protocol | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- if .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | toString | quote }}
{{- end }}
{{- if .headers.existingSecret }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .headers.existingSecret }}
      key: {{ .headers.secretKey }}
{{- end }}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- $attrs := list "k8s.pod.name=$(K8S_POD_NAME)" (printf "k8s.namespace.name=%s" $.Release.Namespace) (printf "k8s.deployment.name=%s" $deployment) }}
{{- range $k, $v := .resourceAttributes }}
{{- $attrs = append $attrs (printf "%s=%s" $k (toString $v)) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- end -}}
{{- end -}}
{{- end -}}
