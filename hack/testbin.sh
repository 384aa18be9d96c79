#!/usr/bin/env bash
# Builds the e2e control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl) and helm from Go modules into bin/k8s. A stamp file records the
# pinned versions so a warm machine skips the build; a version bump in
# tools/*/go.mod rebuilds. Cold: about 14 minutes on 2 cores; warm: seconds.
# With the argument `certmanager` it builds cert-manager instead (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${TESTBIN_DIR:-$PWD/bin/k8s}
K8S=v1.37.2
modver() { sed -n "s#^[[:space:]]*\(require \)\{0,1\}$1 \(v[^ ]*\).*#\2#p" "$2" | head -1; }
ETCD=$(modver go.etcd.io/etcd/server/v3 tools/etcd/go.mod)
HELM=$(modver helm.sh/helm/v3 tools/helm/go.mod)
STAMP="k8s=$K8S etcd=$ETCD helm=$HELM"
BINS=(etcd kube-apiserver kube-controller-manager kubectl helm)

# `hack/testbin.sh certmanager` (make testbin-certmanager): cert-manager's
# controller and cainjector for the optional real-cert-manager e2e test, with
# a stamp of their own; not part of the default build (about 4 minutes cold
# on 2 cores, 190 CPU-seconds; warm: seconds).
if [ "${1:-}" = certmanager ]; then
  CM=$(modver github.com/cert-manager/cert-manager tools/certmanager/go.mod)
  CM_STAMP="cert-manager=$CM"
  if [ -x "$OUT/cert-manager-controller" ] && [ -x "$OUT/cert-manager-cainjector" ] &&
     [ "$(cat "$OUT/.stamp-certmanager" 2>/dev/null)" = "$CM_STAMP" ]; then
    echo "testbin: cert-manager in $OUT is current ($CM_STAMP)"
    exit 0
  fi
  mkdir -p "$OUT"
  rm -f "$OUT/.stamp-certmanager"
  echo "testbin: building $CM_STAMP into $OUT (about 4 minutes the first time)"
  start=$(date +%s)
  tmp=$(mktemp -d "$OUT/.cm-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd tools/certmanager && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$CM" \
    -o "$tmp/" github.com/cert-manager/cert-manager/cmd/controller github.com/cert-manager/cert-manager/cmd/cainjector)
  mv "$tmp/controller" "$OUT/cert-manager-controller"
  mv "$tmp/cainjector" "$OUT/cert-manager-cainjector"
  echo "$CM_STAMP" > "$OUT/.stamp-certmanager"
  echo "testbin: cert-manager built in $(( $(date +%s) - start ))s"
  exit 0
fi

complete=1
for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || complete=0; done
if [ "$complete" = 1 ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "testbin: $OUT is current ($STAMP)"
  exit 0
fi
mkdir -p "$OUT"
rm -f "$OUT/.stamp"
export CGO_ENABLED=0
minor=${K8S#v1.}; minor=${minor%%.*}
echo "testbin: building $STAMP into $OUT (first build takes about 14 minutes on 2 cores)"
start=$(date +%s)
(cd tools/k8s && go build -trimpath \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
  -o "$OUT/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
(cd tools/etcd && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" .)
(cd tools/helm && go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor" \
  -o "$OUT/helm" helm.sh/helm/v3/cmd/helm)
echo "$STAMP" > "$OUT/.stamp"
echo "testbin: built in $(( $(date +%s) - start ))s"
