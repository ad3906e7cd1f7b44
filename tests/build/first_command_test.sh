#!/usr/bin/env bash
# The README's first command builds the programs, never a test or benchmark: a fresh build
# directory configured exactly as `bash scripts/build.sh` configures it, and `ninja -n` of its
# default target, which must compile tessera and tessera-serve and nothing under tests/ or bench/.
set -euo pipefail
source_dir="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
TESSERA_BUILD_DIR="$dir/build" bash "$source_dir/scripts/build.sh" --configure-only
plan=$(ninja -C "$dir/build" -n)
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
