#!/usr/bin/env bash
# Configures and builds tessera into ./build (RelWithDebInfo, Ninja; through ccache when it is
# installed, see cmake/TesseraCcache.cmake).
#   bash scripts/build.sh                   what the first command needs: tessera and
#                                           tessera-serve, no node daemons, tests or benchmarks
#   bash scripts/build.sh --daemons         the node daemons (tessera-device-plugin,
#                                           tessera-dra-plugin, tessera-lease-sync) and
#                                           libtessera.so too
#   bash scripts/build.sh --all             everything: tests and benchmarks too (scripts/test.sh)
#   bash scripts/build.sh ... --configure-only | --dry-run   (--dry-run: ninja -n of that build)
# TESSERA_BUILD_DIR names another build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=OFF
configure_only=false dry_run=false
targets=(tessera tessera-serve)
daemons=(tessera-device-plugin tessera-dra-plugin tessera-lease-sync tessera_c)
for arg in "$@"; do
  case "$arg" in
    --all) tests=ON ;;
    --daemons) targets+=("${daemons[@]}") ;;
    --configure-only) configure_only=true ;;
    --dry-run) dry_run=true ;;
    *) echo "usage: bash scripts/build.sh [--daemons|--all] [--configure-only|--dry-run]" >&2
       exit 2 ;;
  esac
done
[ "$tests" = OFF ] || targets=(all)
dir="${TESSERA_BUILD_DIR:-build}"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTESSERA_BUILD_TESTS=$tests -DTESSERA_BUILD_BENCH=$tests >/dev/null
$configure_only && exit 0
if $dry_run; then
  cmake --build "$dir" --target "${targets[@]}" -- -n
else
  cmake --build "$dir" --target "${targets[@]}" --parallel "$(nproc)"
fi
