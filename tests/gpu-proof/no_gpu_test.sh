#!/usr/bin/env bash
# scripts/gpu-proof.sh on a machine without a GPU: one line, exit 0, nothing claimed, and a report
# that says when, where and with which kit it ran.
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/kit" && echo "tessera v-test" > "$work/kit/MANIFEST"
[ ! -e /proc/driver/nvidia/gpus ] || { echo "FAIL: this machine has NVIDIA GPUs"; exit 1; }
stdout=$(OUT="$work/out" bash "$source_dir/scripts/gpu-proof.sh" "$work/kit")
[ "$stdout" = "result: no NVIDIA GPU on this machine; nothing was checked" ] ||
  { echo "FAIL: stdout was: $stdout"; exit 1; }
report="$work/out/report.md"
expect() { grep -qE "$1" "$report" || { echo "FAIL: no line matching $1 in:"; cat "$report"; exit 1; }; }
expect '^# tessera GPU proof$'
expect '^date: [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$'
expect "^machine: $(uname -n), kernel $(uname -r), "
expect '^driver: none$'
expect '^kit: tessera v-test$'
expect '^result: no NVIDIA GPU on this machine; nothing was checked$'
[ "$(grep -c . "$report")" -eq 6 ] || { echo "FAIL: more than the header and the result:"; cat "$report"; exit 1; }
! grep -qE 'PASS|FAIL' "$report" || { echo "FAIL: a check is claimed"; exit 1; }
echo "ok"
