#!/usr/bin/env bash
# kquota on a local kind cluster: build the image, load it, install a one-broker
# Kafka and the chart, apply an example quota. Needs docker, kind, kubectl, helm.
#   deploy/kind/up.sh                 # then: kubectl get kquota -A
#   kind delete cluster --name kquota # when done
set -euo pipefail

CLUSTER="${CLUSTER:-kquota}"
IMAGE="${IMAGE:-kquota:dev}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "up.sh needs $tool on PATH" >&2; exit 1; }
done

step() { printf '\n==> %s\n' "$*"; }

step "kind cluster '$CLUSTER'"
kind get clusters 2>/dev/null | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER" >/dev/null

step "image $IMAGE (Dockerfile), loaded into the cluster's nodes"
docker build -t "$IMAGE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "Kafka (one broker, namespace kafka)"
kubectl apply -f "$ROOT/deploy/kind/kafka.yaml"
kubectl -n kafka rollout status deployment/kafka --timeout=300s

step "kquota chart (namespace kquota-system)"
helm upgrade --install kquota "$ROOT/helm/kquota" --namespace kquota-system --create-namespace \
  --values "$ROOT/deploy/kind/values.yaml" \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --wait --timeout 5m
kubectl wait --for=condition=Ready kafkacluster/local --timeout=120s

step "an example quota"
kubectl apply -f "$ROOT/examples/00-namespace.yaml" -f "$ROOT/examples/10-clientquota-user.yaml"
kubectl -n team-a wait --for=condition=Ready clientquota/alice --timeout=60s
kubectl get kquota -A
