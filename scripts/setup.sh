#!/usr/bin/env bash
# Installs the Debian 12 packages tessera needs to build and run (`bash scripts/build.sh`, then
# `./build/src/cli/tessera serve`). The test tools come with scripts/setup-test-tools.sh, which
# scripts/test.sh runs. Idempotent: installed packages are skipped. Run as root.
set -euo pipefail

packages=(
  # toolchain; ccache keeps objects between builds and checkouts (scripts/build.sh uses it)
  build-essential cmake ninja-build pkg-config git ccache
  # libraries linked by tessera (see README "Dependencies")
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libtomlplusplus-dev
  libsqlite3-dev libboost-dev libboost-system-dev libssl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # their static archives, linked into the node daemons (cmake/TesseraGrpc.cmake)
  libabsl-dev libc-ares-dev zlib1g-dev
  # running `tessera serve` with its local backend: podman with runc (and gVisor's runsc for
  # isolation gvisor), iptables for the tenancy firewall rules, pci.ids for device names
  podman runc runsc iptables pci.ids
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs Debian packages)" >&2
  exit 1
fi
bash "$(dirname "$0")/lib/apt-install.sh" "${packages[@]}"
