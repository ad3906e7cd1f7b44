#!/usr/bin/env bash
# The README's first command builds what `tessera serve` needs, never a test or benchmark: in a
# fresh build directory, `bash scripts/build.sh --dry-run` (ninja -n of exactly the targets the
# first command builds) must link tessera and tessera-serve and compile nothing under tests/ or
# bench/.
set -euo pipefail
source_dir="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
plan=$(TESSERA_BUILD_DIR="$dir/build" bash "$source_dir/scripts/build.sh" --dry-run)
compiled=$(grep -oE 'Building CXX object [^ ]+|Building C object [^ ]+' <<<"$plan" | awk '{print $4}')
echo "$(wc -l <<<"$compiled") compile steps"
status=0
for program in src/cli/tessera src/cli/tessera-serve; do
  grep -qE "Linking CXX executable $program\$" <<<"$plan" || { echo "FAIL: $program is not built"; status=1; }
done
if grep -E '^(tests|bench)/' <<<"$compiled"; then
  echo "FAIL: the first command compiles the test or benchmark sources above"
  status=1
fi
exit $status
