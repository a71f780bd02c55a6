#!/usr/bin/env bash
# Lays out the root filesystem of the orchestrator's image in ROOTFS from the binaries in
# BIN_DIR (orchestrator, worker, orchctl, built with cgo):
#
#   /usr/local/bin/{orchestrator,worker,orchctl}
#   the C library files they load: what ldd lists (glibc, the dynamic loader), and the glibc
#     libraries NVML itself needs once go-nvml dlopens it (libm, libpthread, libdl, librt)
#   /etc/passwd, /etc/group: root and the user the image runs as, orchestrator (65532)
#   /etc/nsswitch.conf, the CA certificates, /etc/ld.so.conf (where the NVIDIA container
#     toolkit's ldconfig finds the driver's libraries it mounts)
#   /tmp, and /var/lib/gpu-orchestrator (the working directory, owned by 65532: dev mode's data)
#
# NVML (libnvidia-ml.so.1) is not copied: it belongs to the host's driver, and the NVIDIA
# container toolkit mounts it into a GPU pod at run time. The binaries start without it (no GPU,
# or ORCH_SIM_GPUS). scripts/image.sh (make image, with buildah) and the Dockerfile's build
# stage both run this script, so the two images hold the same files. Needs root (or a user
# namespace that maps it) for the ownership of the working directory.
set -euo pipefail

bin=${1:?usage: image-rootfs.sh BIN_DIR ROOTFS}
root=${2:?usage: image-rootfs.sh BIN_DIR ROOTFS}
uid=65532
say() { echo "image-rootfs: $*" >&2; }

for b in orchestrator worker orchctl; do
  [ -x "$bin/$b" ] || { say "$bin/$b is missing"; exit 1; }
done

mkdir -p "$root"/{usr/local/bin,etc/ssl/certs,tmp,proc,sys,dev,var/lib/gpu-orchestrator}
install -m 0755 "$bin/orchestrator" "$bin/worker" "$bin/orchctl" "$root/usr/local/bin/"

# copy FILE: FILE's content (symlinks followed) at the same path under the root.
copy() { cp --parents -L "$1" "$root/"; }

# The libraries ldd names, and the loader (the line without "=>"). A static binary has none.
libdir=""
for b in orchestrator worker orchctl; do
  out=$(ldd "$bin/$b" 2>&1) || { say "$b is statically linked: nothing to copy"; continue; }
  if grep -q 'not found' <<<"$out"; then
    say "$b: a library is missing on this machine:"; echo "$out" >&2; exit 1
  fi
  while read -r path; do
    copy "$path"
    case "$path" in */libc.so.*) libdir=$(dirname "$path") ;; esac
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out")
done

# NVML's own dependencies, from the same glibc (stubs since glibc 2.34, except libm).
if [ -n "$libdir" ]; then
  for lib in libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
    if [ -e "$libdir/$lib" ]; then copy "$libdir/$lib"; fi
  done
fi

cat >"$root/etc/passwd" <<EOF
root:x:0:0:root:/root:/usr/sbin/nologin
orchestrator:x:$uid:$uid:GPU Orchestrator:/var/lib/gpu-orchestrator:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<EOF
root:x:0:
orchestrator:x:$uid:
EOF
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
# The NVIDIA container toolkit mounts the driver's libraries into one of these (which one
# depends on the toolkit and on /etc/debian_version) and runs ldconfig over this file; the
# loader searches the multiarch directories without it too. ORCH_NVML_LIBRARY names the library
# where none of this applies.
cat >"$root/etc/ld.so.conf" <<'EOF'
include /etc/ld.so.conf.d/*.conf
/usr/local/nvidia/lib64
/usr/lib64
/usr/lib/x86_64-linux-gnu
/usr/lib/aarch64-linux-gnu
EOF
mkdir -p "$root/etc/ld.so.conf.d"
if [ -e /etc/debian_version ]; then cp /etc/debian_version "$root/etc/"; fi
if [ -e /etc/ssl/certs/ca-certificates.crt ]; then
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
else
  say "no /etc/ssl/certs/ca-certificates.crt here (apt-get install ca-certificates): the image trusts no CA"
fi

chmod 1777 "$root/tmp"
chown "$uid:$uid" "$root/var/lib/gpu-orchestrator"
chmod 0750 "$root/var/lib/gpu-orchestrator"
