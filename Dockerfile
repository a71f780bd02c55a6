# The orchestrator's image for a Docker engine (or `buildah bud`) and a registry:
#
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t registry.example.com/gpu-orchestrator:0.1.0 .
#
# `make image` builds the same files without a Docker engine and without pulling anything
# (scripts/image.sh): both lay out the root filesystem with scripts/image-rootfs.sh, and the
# last stage's settings are those scripts/image.sh gives buildah (go test ./deploy/ compares
# them with the image make image builds).
#
# The binaries use cgo (go-nvml), so they are built against the glibc of the build stage, which
# the image carries (scratch otherwise holds nothing). NVML itself comes from the host's driver
# at run time, mounted by the NVIDIA container toolkit into GPU pods.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ENV CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations
RUN go build -ldflags "-s -w -X main.version=${VERSION}" -o /out/bin/ \
      ./cmd/orchestrator ./cmd/worker ./cmd/orchctl \
 && bash scripts/image-rootfs.sh /out/bin /out/rootfs

FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
COPY --from=build /out/rootfs/ /
COPY --from=build --chown=65532:65532 /out/rootfs/var/lib/gpu-orchestrator/ /var/lib/gpu-orchestrator/
LABEL org.opencontainers.image.title="gpu-orchestrator" \
      org.opencontainers.image.description="GPU Orchestrator: orchestrator, worker and orchctl" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/gpuorch/orchestrator"
ENV PATH=/usr/local/bin \
    HOME=/var/lib/gpu-orchestrator \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64 \
    NVIDIA_DRIVER_CAPABILITIES=utility
USER 65532:65532
WORKDIR /var/lib/gpu-orchestrator
EXPOSE 8080 9091
ENTRYPOINT ["orchestrator"]
CMD ["serve"]
