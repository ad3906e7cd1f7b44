#!/usr/bin/env bash
# Gathers what scripts/gpu-proof.sh needs on the GPU machine, which has no podman, no network
# and perhaps another glibc, into one directory to carry there (docs/real-gpu.md):
#   bin/tessera     the built tessera, without debug info
#   bin/runc        Debian's runc
#   bin/gpu-proof   the checks made with the CDI reference library (static Go)
#   bin/cdi-validate-go   the reference library's validation (tests/tools/cdi-validate-go)
#   bin/busybox     the container's shell (static)
#   lib/            the glibc and libseccomp those load: the ELF interpreter and library path of
#                   tessera and runc point at /tmp/tessera-gpu-proof-kit/lib, where gpu-proof.sh
#                   links the kit, so they run on any x86-64 Linux
#   src/            the CUDA program gpu-proof.sh builds there with nvcc
#   MANIFEST        what went in
#   bash scripts/gpu-proof-kit.sh [BUILD_DIR] [KIT_DIR]   (defaults build, BUILD_DIR/gpu-proof-kit)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kit=${2:-$build/gpu-proof-kit}
anchor=/tmp/tessera-gpu-proof-kit
[ -x "$build/src/cli/tessera" ] || { echo "no $build/src/cli/tessera: bash scripts/build.sh first" >&2; exit 1; }
for tool in patchelf go /usr/sbin/runc /bin/busybox; do
  command -v "$tool" >/dev/null || { echo "$tool missing: bash scripts/setup-test-tools.sh" >&2; exit 1; }
done
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib" "$kit/src"
kit=$(cd "$kit" && pwd)

strip --strip-debug -o "$kit/bin/tessera" "$build/src/cli/tessera"
cp /usr/sbin/runc "$kit/bin/runc"
for program in "$kit/bin/tessera" "$kit/bin/runc"; do
  # Every shared library it loads, and the loader itself, from this machine's Debian 12.
  ldd "$program" | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r library; do
    cp -L "$library" "$kit/lib/"
  done
  patchelf --set-interpreter "$anchor/lib/ld-linux-x86-64.so.2" --set-rpath "$anchor/lib" "$program"
done
gocache="$(cd "$build" && pwd)/go-cache"
for tool in gpu-proof cdi-validate-go; do
  (cd "tests/tools/${tool%-go}-go" &&
    GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$gocache" GOFLAGS=-buildvcs=false \
    CGO_ENABLED=0 go build -ldflags "-s -w" -o "$kit/bin/$tool" .)
done
cp /bin/busybox "$kit/bin/busybox"
cp tests/tools/gpu-proof/cuda_probe.cu "$kit/src/"
{
  echo "tessera $(git describe --always --dirty) ($("$build/src/cli/tessera" --version))"
  echo "runc: $(/usr/sbin/runc --version | head -n 1), from Debian package $(dpkg-query -W -f='${Version}' runc)"
  echo "glibc: $(dpkg-query -W -f='${Version}' libc6), libseccomp: $(dpkg-query -W -f='${Version}' libseccomp2)"
  echo "busybox: $(dpkg-query -W -f='${Version}' busybox-static)"
  echo "CDI library: $(dpkg-query -W -f='${Version}' golang-github-container-orchestrated-devices-container-device-interface-dev)"
  echo "prepared: $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
} > "$kit/MANIFEST"
echo "$kit: $(du -sh "$kit" | cut -f1)"
