#!/usr/bin/env bash
# make image: the orchestrator's image, built without a Docker engine and without pulling
# anything. The three binaries are built here (cgo, against this machine's glibc), laid out from
# scratch by scripts/image-rootfs.sh (the binaries, the C library files they load, a non-root
# user) in a buildah container, and committed. Prints the image's name, id and size.
#
#   IMAGE_REF  the name:tag to commit (make passes $(IMAGE):$(VERSION))
#   VERSION    the release: `orchestrator version` and the image's version label
#
# buildah is Debian's package (make services installs it); its storage is the vfs driver
# (--storage-driver vfs on every call, here and wherever the image is used afterwards: no
# overlay or fuse needed, plain copies). Run as root. The Dockerfile builds the same files for a
# Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."

ref=${IMAGE_REF:?IMAGE_REF (name:tag) is required}
version=${VERSION:?VERSION is required}
buildah=(buildah --storage-driver vfs)
say() { echo "image: $*" >&2; }

command -v buildah >/dev/null 2>&1 || {
  say "buildah is not installed: apt-get install buildah (make services installs it)"
  exit 1
}
if [ "$(id -u)" -ne 0 ]; then
  say "run it as root: buildah mounts the image's filesystem and the files get their owners"
  exit 1
fi

start=$SECONDS
tmp=$(mktemp -d)
ctr=""
cleanup() {
  if [ -n "$ctr" ]; then "${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
source_url="https://$(go list -m)"

say "building the binaries ($version)…"
CGO_ENABLED=1 CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} \
  go build -ldflags "-s -w -X main.version=$version" -o "$tmp/bin/" \
  ./cmd/orchestrator ./cmd/worker ./cmd/orchctl

ctr=$("${buildah[@]}" from --quiet scratch)
mnt=$("${buildah[@]}" mount "$ctr")
bash scripts/image-rootfs.sh "$tmp/bin" "$mnt"
"${buildah[@]}" umount "$ctr" >/dev/null

# The same settings as the Dockerfile's last stage (the image test compares them).
"${buildah[@]}" config \
  --user 65532:65532 \
  --workingdir /var/lib/gpu-orchestrator \
  --env PATH=/usr/local/bin \
  --env HOME=/var/lib/gpu-orchestrator \
  --env LD_LIBRARY_PATH=/usr/local/nvidia/lib64 \
  --env NVIDIA_DRIVER_CAPABILITIES=utility \
  --port 8080 --port 9091 \
  --entrypoint '["orchestrator"]' \
  --cmd '["serve"]' \
  --label org.opencontainers.image.title=gpu-orchestrator \
  --label "org.opencontainers.image.description=GPU Orchestrator: orchestrator, worker and orchctl" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.source=$source_url" \
  --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$ctr"

# Committing under a name another image holds moves the name: remove the image it leaves
# unnamed, so that rebuilding does not pile up copies (vfs keeps whole ones).
old=$("${buildah[@]}" images --no-trunc --noheading --format '{{.ID}}' "$ref" 2>/dev/null || true)
id=$("${buildah[@]}" commit --quiet --rm "$ctr" "$ref")
ctr=""
if [ -n "$old" ] && [ "$old" != "$id" ] && [ "$old" != "sha256:$id" ]; then
  "${buildah[@]}" rmi "$old" >/dev/null 2>&1 || true
fi

size=$("${buildah[@]}" images --noheading --format '{{.Size}}' "$ref")
echo "image $ref"
echo "id    $id"
echo "size  $size"
say "done in $((SECONDS - start)) s"
