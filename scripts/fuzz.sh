#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan+UBSan) and runs each for N seconds (default 10),
# first over its committed regression inputs in tests/fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DTESSERA_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target fuzzers --parallel "$(nproc)"
status=0
for fuzzer in build-fuzz/tests/fuzz/fuzz_*; do
  [ -x "$fuzzer" ] || continue
  name=$(basename "$fuzzer")
  corpus="tests/fuzz/corpus/$name"
  work=$(mktemp -d)
  mkdir -p "$corpus"
  echo "== $name: ${seconds}s"
  if ! "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$work/" "$work" "$corpus" >"$work/log" 2>&1; then
    echo "FAILED: $name (crash input kept in $work; add it to $corpus)"
    tail -n 40 "$work/log"
    status=1
  else
    grep -E '^(Done|#[0-9]+ +DONE)' "$work/log" | tail -n 1 || true
  fi
done
exit $status
