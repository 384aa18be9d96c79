# syntax=docker/dockerfile:1
# runai-webhook: a static Go binary on distroless, non-root, no shell.
#   docker build -t ghcr.io/hopsworks/runai-webhook:<version> --build-arg VERSION=<version> .
# The Run:ai simulator for the kind e2e path (hack/e2e-kind.sh) is a separate
# target that the default build never touches:
#   docker build --target sim -t ghcr.io/hopsworks/runai-sim:e2e .

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags "-s -w -X main.version=${VERSION}" -o /out/runai-webhook ./cmd/webhook

FROM build AS build-sim
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags "-s -w" -o /out/runai-sim ./cmd/runai-sim

FROM gcr.io/distroless/static:nonroot AS sim
COPY --from=build-sim /out/runai-sim /runai-sim
USER 65532:65532
ENTRYPOINT ["/runai-sim"]

# The default (last) stage: the webhook. The chart runs it with a read-only
# root file system; it writes nothing but logs to stderr.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/runai-webhook /runai-webhook
USER 65532:65532
ENTRYPOINT ["/runai-webhook"]
