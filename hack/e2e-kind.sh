#!/usr/bin/env bash
# The e2e suite against a kind cluster: what a user installs, on a real
# kubelet. Needs docker (with an engine), kind, network access to the
# cert-manager release manifest and to kind's node image; kubectl and helm come
# from bin/k8s (make testbin). It cannot run on the project's CI machines,
# which have no Docker engine (see /work/shared/testbed/K8S-LOCAL.md §5).
#
# Steps: kind cluster -> image (webhook, and the Run:ai simulator as a
# separate target) -> kind load -> cert-manager from its release manifest ->
# the chart (cert-manager mode, one replica, Run:ai on the simulator sidecar)
# -> rollout and CA injection checked -> USE_EXISTING_CLUSTER=true go test
# ./e2e/... (the framework then starts nothing and runs the tests listed in
# kindTests, e2e/main_test.go).
#
# What this path covers that the local test bed cannot: the image (static,
# distroless, non-root, read-only root file system), the chart's Deployment,
# Service, RBAC, NetworkPolicy and probes on a real kubelet, cert-manager
# issuing the serving certificate and cainjector injecting its CA, and
# admission through the Service. What it does not: the in-process simulator's
# fault injection and call counting, on-demand controller passes and the
# in-process metrics, which the local bed covers.
#
# Environment: KIND_CLUSTER (default runai-webhook-e2e), IMAGE, SIM_IMAGE,
# CERT_MANAGER_VERSION (default v1.21.2), KEEP_CLUSTER=1 to keep the cluster,
# GO_TEST_FLAGS (default "-count=1 -timeout 20m -v").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CLUSTER=${KIND_CLUSTER:-runai-webhook-e2e}
IMAGE=${IMAGE:-ghcr.io/hopsworks/runai-webhook:e2e}
SIM_IMAGE=${SIM_IMAGE:-ghcr.io/hopsworks/runai-sim:e2e}
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-v1.21.2}
GO_TEST_FLAGS=${GO_TEST_FLAGS:--count=1 -timeout 20m -v}
NS=runai-webhook
RELEASE=runai-webhook
# The credentials and seed the suite expects (e2e/framework, e2e/main_test.go).
CLIENT_ID=hopsworks
CLIENT_SECRET=e2e-client-secret-never-logged
SIM_PORT=18080

for tool in docker kind; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: $tool is needed" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine answers (docker info failed)" >&2; exit 1; }
hack/testbin.sh
KUBECTL=$ROOT/bin/k8s/kubectl
HELM=$ROOT/bin/k8s/helm
WORK=$(mktemp -d)
export KUBECONFIG=$WORK/kubeconfig
export HELM_CACHE_HOME=$WORK/helm HELM_CONFIG_HOME=$WORK/helm HELM_DATA_HOME=$WORK/helm

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    echo "e2e-kind: failed; webhook pods and logs:" >&2
    "$KUBECTL" -n "$NS" get pods -o wide >&2 || true
    "$KUBECTL" -n "$NS" logs "deploy/$RELEASE" --all-containers --tail=100 >&2 || true
  fi
  if [ "${KEEP_CLUSTER:-}" != 1 ]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  else
    echo "e2e-kind: kept cluster $CLUSTER (kubeconfig $KUBECONFIG)"
  fi
  exit "$rc"
}
trap cleanup EXIT

step() { echo "e2e-kind: $*"; }

if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  step "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --wait 180s
fi
kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"

step "building $IMAGE and $SIM_IMAGE"
docker build -t "$IMAGE" --build-arg VERSION=e2e .
docker build --target sim -t "$SIM_IMAGE" .
kind load docker-image --name "$CLUSTER" "$IMAGE" "$SIM_IMAGE"

step "installing cert-manager $CERT_MANAGER_VERSION"
"$KUBECTL" apply --server-side -f "https://github.com/cert-manager/cert-manager/releases/download/$CERT_MANAGER_VERSION/cert-manager.yaml"
for d in cert-manager cert-manager-cainjector cert-manager-webhook; do
  "$KUBECTL" -n cert-manager rollout status "deploy/$d" --timeout=180s
done

step "installing the chart"
"$KUBECTL" create namespace "$NS" --dry-run=client -o yaml | "$KUBECTL" apply -f -
"$KUBECTL" -n "$NS" create secret generic runai-hopsworks --from-literal=clientSecret="$CLIENT_SECRET" \
  --dry-run=client -o yaml | "$KUBECTL" apply -f -
"$HELM" upgrade --install "$RELEASE" manifests/chart --namespace "$NS" \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set replicaCount=1 \
  --set variables.run_ai_enable=true \
  --set variables.run_ai_url="http://127.0.0.1:$SIM_PORT" \
  --set variables.run_ai_client_id="$CLIENT_ID" \
  --set variables.run_ai_project_gpu_quota=2

# Run:ai: the simulator as a sidecar of the (single) webhook pod, on loopback,
# seeded like the local bed's departments.
"$KUBECTL" -n "$NS" patch deployment "$RELEASE" --type=json -p "$(cat <<EOF
[{"op": "add", "path": "/spec/template/spec/containers/-", "value": {
  "name": "runai-sim", "image": "$SIM_IMAGE", "imagePullPolicy": "Never",
  "args": ["--listen=127.0.0.1:$SIM_PORT", "--departments=research,vision",
           "--client-id=$CLIENT_ID", "--client-secret=$CLIENT_SECRET"],
  "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}}}}]
EOF
)"
"$KUBECTL" -n "$NS" rollout status "deploy/$RELEASE" --timeout=300s

step "checking cert-manager's CA injection"
for cfg in mutatingwebhookconfiguration validatingwebhookconfiguration; do
  for i in $(seq 1 60); do
    ca=$("$KUBECTL" get "$cfg" "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
    [ -n "$ca" ] && break
    sleep 2
  done
  [ -n "$ca" ] || { echo "e2e-kind: no caBundle in $cfg $RELEASE after 120s" >&2; exit 1; }
done

step "running the e2e suite against the cluster"
# shellcheck disable=SC2086
USE_EXISTING_CLUSTER=true go test $GO_TEST_FLAGS ./e2e/...
