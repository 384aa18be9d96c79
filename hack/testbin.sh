#!/usr/bin/env bash
# Builds the e2e control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl) and helm from Go modules into bin/k8s. A stamp file records the
# pinned versions so a warm machine skips the build; a version bump in
# tools/*/go.mod rebuilds. Cold: about 14 minutes on 2 cores; warm: seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${TESTBIN_DIR:-$PWD/bin/k8s}
K8S=v1.37.2
modver() { sed -n "s#^[[:space:]]*\(require \)\{0,1\}$1 \(v[^ ]*\).*#\2#p" "$2" | head -1; }
ETCD=$(modver go.etcd.io/etcd/server/v3 tools/etcd/go.mod)
HELM=$(modver helm.sh/helm/v3 tools/helm/go.mod)
STAMP="k8s=$K8S etcd=$ETCD helm=$HELM"
BINS=(etcd kube-apiserver kube-controller-manager kubectl helm)

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
