#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (what building and running need, then the test tools), builds
# everything, tests and benchmarks included, and runs the whole test suite: unit and end-to-end
# tests through CTest, the mingw-w64 cross build of the Windows discovery tool, then every
# libFuzzer target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test-tools.sh
bash scripts/build.sh --all
log=$(mktemp)
status=0
(cd build && ctest --output-on-failure --parallel 2 --timeout 600) 2>&1 | tee "$log" || status=1
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
failed=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -n 1)
cross_failed=0
bash scripts/build-windows.sh || { echo "FAILED: mingw-w64 cross build"; cross_failed=1; status=1; }
fuzz_log=$(mktemp)
bash scripts/fuzz.sh "${TESSERA_FUZZ_SECONDS:-6}" 2>&1 | tee "$fuzz_log" || status=1
fuzz_total=$(grep -c '^== fuzz_' "$fuzz_log" || true)
fuzz_failed=$(grep -c '^FAILED: fuzz_' "$fuzz_log" || true)
passed=$(( ${total:-0} - ${failed:-0} + 1 - cross_failed + fuzz_total - fuzz_failed ))
echo "summary: ${passed} passed, $(( ${failed:-0} + cross_failed + fuzz_failed )) failed"
exit $status
