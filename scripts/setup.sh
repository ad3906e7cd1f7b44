#!/usr/bin/env bash
# Installs every Debian 12 package tessera needs to build, test and run.
# Idempotent: apt-get skips what is already installed. Run as root.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git clang-14 libclang-rt-14-dev clang-format
  # libraries linked by tessera (see README "Dependencies")
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libtomlplusplus-dev
  libsqlite3-dev libboost-dev libboost-system-dev libssl-dev libcurl4-openssl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  # Windows native discovery backend, cross-compiled
  g++-mingw-w64-x86-64-posix directx-headers-dev
  # test peers: real consumers and servers
  podman runc busybox-static golang-go
  # gVisor's runsc: isolation gvisor in tessera serve and its end-to-end test
  runsc
  golang-github-container-orchestrated-devices-container-device-interface-dev
  python3 python3-kubernetes python3-yaml
  # Kubernetes objects checked against the CRDs' OpenAPI v3 schemas in tests
  python3-jsonschema
  # Kubernetes client tests: a test PKI (openssl CLI) and the scripted API server's control calls
  openssl curl
  nfs-ganesha nfs-ganesha-vfs libnfs-utils
  chromium wrk pciutils pci.ids file procps iproute2 kmod
)

export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs Debian packages)" >&2
  exit 1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
