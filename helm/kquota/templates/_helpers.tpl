{{/* Names and labels shared by the templates. */}}

{{- define "kquota.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kquota.fullname" -}}
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

{{- define "kquota.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kquota.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kquota.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kquota.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kquota
{{- end -}}

{{- define "kquota.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kquota.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kquota.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kquota.peeringName" -}}
{{- default (include "kquota.fullname" .) .Values.peering.name -}}
{{- end -}}

{{- define "kquota.defaultCluster" -}}
{{- if .Values.operator.defaultCluster -}}
{{- .Values.operator.defaultCluster -}}
{{- else if .Values.kafka.clusters -}}
{{- (first .Values.kafka.clusters).name -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/*
The spec.strimzi of every KafkaCluster the operator may connect through
Strimzi, as a JSON list: the chart's (kafka.clusters) and those kept elsewhere
(kafka.extraStrimzi).
*/}}
{{- define "kquota.strimziSpecs" -}}
{{- $out := list -}}
{{- range .Values.kafka.clusters -}}
{{- with (.spec | default dict).strimzi }}{{ $out = append $out . }}{{ end -}}
{{- end -}}
{{- range .Values.kafka.extraStrimzi }}{{ $out = append $out . }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The Secrets the operator may read, as a JSON object {namespace: [names]}:
every Secret the chart's KafkaClusters reference in spec.security, the CA and
KafkaUser Secrets of every Strimzi connection (kquota.strimziSpecs), plus
kafka.extraSecrets. Names are sorted and unique, so the Roles are stable.
*/}}
{{- define "kquota.secretsByNamespace" -}}
{{- $refs := list -}}
{{- range .Values.kafka.clusters -}}
{{- $security := (.spec | default dict).security | default dict -}}
{{- with ($security.sasl | default dict).credentialsSecretRef }}{{ $refs = append $refs . }}{{ end -}}
{{- with (($security.sasl | default dict).oauth | default dict).clientSecretRef }}{{ $refs = append $refs (dict "namespace" .namespace "name" .name) }}{{ end -}}
{{- with (($security.sasl | default dict).oauth | default dict).caSecretRef }}{{ $refs = append $refs (dict "namespace" .namespace "name" .name) }}{{ end -}}
{{- with (($security.sasl | default dict).kerberos | default dict).keytabSecretRef }}{{ $refs = append $refs (dict "namespace" .namespace "name" .name) }}{{ end -}}
{{- with ($security.tls | default dict).caSecretRef }}{{ $refs = append $refs . }}{{ end -}}
{{- with ($security.tls | default dict).clientCertSecretRef }}{{ $refs = append $refs . }}{{ end -}}
{{- end -}}
{{- range (include "kquota.strimziSpecs" . | fromJsonArray) -}}
{{- /* A Strimzi Kafka's cluster CA, and the KafkaUser's Secret (named after it; a STRIMZI_SECRET_PREFIX goes in kafka.extraSecrets). */ -}}
{{- $kns := .kafka.namespace -}}
{{- $refs = append $refs (dict "namespace" $kns "name" (printf "%s-cluster-ca-cert" .kafka.name)) -}}
{{- with .kafkaUser }}{{ $refs = append $refs (dict "namespace" (.namespace | default $kns) "name" .name) }}{{ end -}}
{{- with (.oauth | default dict).clientSecretRef }}{{ $refs = append $refs (dict "namespace" .namespace "name" .name) }}{{ end -}}
{{- with (.oauth | default dict).caSecretRef }}{{ $refs = append $refs (dict "namespace" .namespace "name" .name) }}{{ end -}}
{{- end -}}
{{- range .Values.kafka.extraSecrets }}{{ $refs = append $refs . }}{{ end -}}
{{- $byNs := dict -}}
{{- range $refs -}}
{{- $_ := set $byNs .namespace (append (get $byNs .namespace | default list) .name | uniq | sortAlpha) -}}
{{- end -}}
{{- toJson $byNs -}}
{{- end -}}

{{/*
ConfigMaps the KafkaClusters' spec.security references (a GSSAPI cluster's krb5.conf), by namespace:
{"<ns>": [names]}.
*/}}
{{- define "kquota.configMapsByNamespace" -}}
{{- $byNs := dict -}}
{{- range .Values.kafka.clusters -}}
{{- $security := (.spec | default dict).security | default dict -}}
{{- with (($security.sasl | default dict).kerberos | default dict).krb5ConfigMapRef -}}
{{- $_ := set $byNs .namespace (append (get $byNs .namespace | default list) .name | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- toJson $byNs -}}
{{- end -}}

{{/*
Strimzi objects the KafkaClusters connect through (kquota.strimziSpecs), by namespace:
{"<ns>": {"kafkas": [names], "kafkausers": [names]}}. KafkaUsers are also
listed (the User Operator's users decide what kquota may not touch).
*/}}
{{- define "kquota.strimziByNamespace" -}}
{{- $byNs := dict -}}
{{- range (include "kquota.strimziSpecs" . | fromJsonArray) -}}
{{- with . -}}
{{- $kns := .kafka.namespace -}}
{{- $entry := get $byNs $kns | default (dict "kafkas" list "kafkausers" list) -}}
{{- $_ := set $entry "kafkas" (append $entry.kafkas .kafka.name | uniq | sortAlpha) -}}
{{- $_ := set $byNs $kns $entry -}}
{{- with .kafkaUser -}}
{{- $uns := .namespace | default $kns -}}
{{- $u := get $byNs $uns | default (dict "kafkas" list "kafkausers" list) -}}
{{- $_ := set $u "kafkausers" (append $u.kafkausers .name | uniq | sortAlpha) -}}
{{- $_ := set $byNs $uns $u -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $byNs -}}
{{- end -}}

{{/*
The operator container's resources: .Values.resources, with the memory request and limit derived
from .Values.expectedResources where they are not set (kquota.reconcile.sizing: 130 MiB plus 24 KiB
per resource at the start-up peak; the limit 25% above; tests/unit/test_sizing.py checks both agree).
*/}}
{{- define "kquota.resources" -}}
{{- $res := deepCopy (.Values.resources | default dict) -}}
{{- $n := int (.Values.expectedResources | default 0) -}}
{{- $need := add 130 (div (add (mul $n 24) 1023) 1024) -}}
{{- $limit := div (add (mul $need 125) 99) 100 -}}
{{- $requests := get $res "requests" | default dict -}}
{{- if not (hasKey $requests "memory") }}{{ $_ := set $requests "memory" (printf "%dMi" $need) }}{{ end -}}
{{- $_ := set $res "requests" $requests -}}
{{- $limits := get $res "limits" | default dict -}}
{{- if not (hasKey $limits "memory") }}{{ $_ := set $limits "memory" (printf "%dMi" $limit) }}{{ end -}}
{{- $_ := set $res "limits" $limits -}}
{{- toYaml $res -}}
{{- end -}}
