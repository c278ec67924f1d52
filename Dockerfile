# The coordinator's image: the coordinator (the entrypoint), the housekeeper
# and coordctl, static, on an empty base, run as a non-root user.
#
#   docker build -t coordinator:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#
# compiles them in the Go stage below. `make image` builds the same final
# stage from binaries built on the host (BINARIES=context, with podman or
# buildah), and its test checks that image's content: see docs/deploying.md, "The container
# image". Both lay out the files with scripts/image-rootfs.sh.
#
# There is no HEALTHCHECK: probes are the orchestrator's (Kubernetes' native
# gRPC probes on the health service; the Helm chart sets them), and a
# HEALTHCHECK would need a shell or a probe binary, which this image has not.

# VERSION is the VERSION file's (a test checks that they agree); REVISION the
# commit, for the label and -version (the build stage has no .git).
ARG VERSION=0.1.0
ARG REVISION=
# build: compile in the Go stage; context: take the laid-out files from the
# build context (make image).
ARG BINARIES=build

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION
ARG REVISION
ARG TARGETARCH
RUN GOFLAGS=-buildvcs=false GOARCH=${TARGETARCH} VERSION=${VERSION} REVISION=${REVISION} ./scripts/image-rootfs.sh /out

FROM scratch AS context
LABEL dev.coordinator.stage=context
COPY . /out/

FROM ${BINARIES} AS binaries

FROM scratch
ARG VERSION
ARG REVISION
COPY --from=binaries /out/rootfs/ /
COPY --from=binaries --chown=65532:65532 /out/state/ /var/lib/coordinator/
USER 65532:65532
WORKDIR /var/lib/coordinator
# Listen on every interface, as a container must; the memory store's state
# goes to a directory the user owns (mount a volume there to keep it).
ENV COORDINATOR_LISTEN=:7400 \
    COORDINATOR_METRICS_LISTEN=:7401 \
    COORDINATOR_STATE_DIR=/var/lib/coordinator \
    HOUSEKEEPER_METRICS_LISTEN=:7402
# 7400 gRPC (leases and health), 7401 the coordinator's /metrics, 7402 the
# housekeeper's /metrics or, with COORDINATOR_HEALTH_LISTEN=:7402, the
# coordinator's plaintext health port beside a TLS listener.
EXPOSE 7400 7401 7402
ENTRYPOINT ["/usr/local/bin/coordinator"]
LABEL org.opencontainers.image.title="coordinator" \
      org.opencontainers.image.description="Lock and election leases with fencing tokens over gRPC, and a housekeeper for Deckard queues" \
      org.opencontainers.image.source="https://github.com/coordinator-dev/coordinator" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
