# runai-webhook. The two commands: `make demo` and `make test`.
# Everything they need is built from Go modules (see hack/testbin.sh).
SHELL := /bin/bash
GO ?= go
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
K8S_BIN := $(BIN)/k8s
HELM := $(K8S_BIN)/helm
export KUBEBUILDER_ASSETS := $(K8S_BIN)
# helm keeps its caches here, not in $HOME.
export HELM_CACHE_HOME := $(BIN)/helm/cache
export HELM_CONFIG_HOME := $(BIN)/helm/config
export HELM_DATA_HOME := $(BIN)/helm/data
export RUNAI_OPENAPI ?= $(abspath $(ROOT)/../shared/runai/openapi.json)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build test unit e2e lint bench chaos fuzz demo manifests testbin testbin-certmanager e2e-certmanager e2e-kind image clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build the webhook and the Run:ai simulator into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(BIN)/runai-webhook ./cmd/webhook
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/runai-sim ./cmd/runai-sim

testbin: ## build etcd, kube-apiserver, kube-controller-manager, kubectl and helm into bin/k8s (14 min cold, seconds warm)
	@hack/testbin.sh

testbin-certmanager: ## build cert-manager's controller and cainjector (v1.11.5) into bin/k8s (4 min cold, seconds warm)
	@hack/testbin.sh certmanager

manifests: testbin ## render the Helm chart with manifests/install-values.yaml into manifests/install.yaml
	$(HELM) template runai-webhook manifests/chart --namespace runai-webhook -f manifests/install-values.yaml > manifests/install.yaml

lint: ## gofmt, go vet, helm lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(HELM) lint manifests/chart

unit: ## unit and contract tests only (no control plane)
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /e2e)

test: testbin lint ## everything: unit, contract, chart and end-to-end tests
	$(GO) test -count=1 -timeout 25m ./... 2>&1 | tee $(BIN)/test.log; exit $${PIPESTATUS[0]}

e2e: testbin ## end-to-end suite against a local control plane
	$(GO) test -count=1 -timeout 20m -v ./e2e/... 2>&1 | tee $(BIN)/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|e2e:)|^\s+\S+_test.go'; exit $${PIPESTATUS[0]}

e2e-certmanager: testbin testbin-certmanager ## the chart's Issuer and Certificate with a real cert-manager (controller + cainjector) on the local control plane
	$(GO) test -count=1 -timeout 10m -tags certmanager -run 'CertManager' -v ./e2e/ 2>&1 | tee $(BIN)/e2e-certmanager.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|e2e:)|^\s+\S+_test.go'; exit $${PIPESTATUS[0]}

bench: testbin ## benchmarks against baselines in the same run; writes bench/REPORT.md
	$(GO) run ./bench

chaos: testbin ## the full fault matrix, two replicas under load with a kill and an API server restart, then every fuzzer for CHAOS_FUZZTIME (default 10s)
	@set -o pipefail; $(GO) test -count=1 -timeout 60m -tags chaos -run 'Chaos|FaultMatrixFull' -v ./e2e/ 2>&1 | tee $(BIN)/chaos.log \
		| grep -E '^(--- |PASS|FAIL|ok)|(matrix|chaos|KNOWN BUG)'; e2e=$$?; \
	hack/fuzz.sh $${CHAOS_FUZZTIME:-10s} 2>&1 | tee $(BIN)/fuzz.log | grep -E '^fuzz:'; fuzz=$${PIPESTATUS[0]}; \
	echo "chaos: e2e exit $$e2e, fuzz exit $$fuzz (logs: bin/chaos.log, bin/fuzz.log, bin/fuzz/)"; exit $$(( e2e || fuzz ))

fuzz: ## run every fuzzer for FUZZTIME (default 20s)
	@hack/fuzz.sh $${FUZZTIME:-20s}

demo: testbin build ## the story, end to end, on a local control plane and the Run:ai simulator
	$(GO) run ./e2e/demo

e2e-kind: ## the suite on kind (needs a Docker engine): cluster, image, cert-manager, chart, USE_EXISTING_CLUSTER=true
	IMAGE=ghcr.io/hopsworks/runai-webhook:$(VERSION) hack/e2e-kind.sh

image: ## container image (needs Docker)
	docker build -t ghcr.io/hopsworks/runai-webhook:$(VERSION) --build-arg VERSION=$(VERSION) .

clean:
	rm -rf $(BIN)/runai-webhook $(BIN)/runai-sim
