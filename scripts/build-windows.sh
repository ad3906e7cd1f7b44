#!/usr/bin/env bash
# Cross-compiles the native Windows discovery tool (tessera-windows-discover.exe) with mingw-w64
# into ./build-windows. It has not been run on Windows by this project's CI: it only has to build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-windows -G Ninja -DTESSERA_WINDOWS_NATIVE=ON \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/mingw-w64-x86_64.cmake" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-windows --parallel "$(nproc)"
file build-windows/src/inventory/windows/tessera-windows-discover.exe
