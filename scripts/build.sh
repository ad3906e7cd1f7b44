#!/usr/bin/env bash
# Configures and builds tessera into ./build (RelWithDebInfo, Ninja; through ccache when it is
# installed, see cmake/TesseraCcache.cmake).
#   bash scripts/build.sh                   the programs: tessera, tessera-serve, the node
#                                           daemons and libtessera.so, not tests or benchmarks
#   bash scripts/build.sh --all             the tests and benchmarks too (scripts/test.sh)
#   bash scripts/build.sh [--all] --configure-only
# TESSERA_BUILD_DIR names another build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=OFF
configure_only=false
for arg in "$@"; do
  case "$arg" in
    --all) tests=ON ;;
    --configure-only) configure_only=true ;;
    *) echo "usage: bash scripts/build.sh [--all] [--configure-only]" >&2; exit 2 ;;
  esac
done
dir="${TESSERA_BUILD_DIR:-build}"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTESSERA_BUILD_TESTS=$tests -DTESSERA_BUILD_BENCH=$tests >/dev/null
$configure_only || cmake --build "$dir" --parallel "$(nproc)"
