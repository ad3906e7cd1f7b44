#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds everything and runs the whole test suite:
# unit and end-to-end tests through CTest, then every libFuzzer target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure --parallel 2 --timeout 600)
bash scripts/fuzz.sh "${TESSERA_FUZZ_SECONDS:-10}"
