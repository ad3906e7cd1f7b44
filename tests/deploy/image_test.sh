#!/usr/bin/env bash
# The image the manifests name exists and runs: built (or reused when the binaries are unchanged)
# by scripts/build-image.sh from Debian packages and this build tree, then run with podman:
# `tessera --version`, `tessera inventory --root /host` on a fixture host mounted at /host (the
# same JSON as the build tree's binary prints), `tessera-serve --help`, and every other binary.
# usage: image_test.sh SOURCE_DIR BUILD_DIR      (root, podman, mmdebstrap or a cached base)
set -uo pipefail
source_dir=$1
build_dir=$2
failures=0
check() {  # check CONDITION_STATUS WHAT
  if [ "$1" -eq 0 ]; then echo "ok   $2"; else echo "FAIL $2"; failures=$((failures + 1)); fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# runc (crun fails on this kernel's hybrid cgroups) and ulimits below this machine's hard limits.
printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n[engine]\nruntime = "runc"\n' \
  > "$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$source_dir/deploy/helm/tessera/Chart.yaml")
image="ghcr.io/tessera/tessera:$version"
bash "$source_dir/scripts/build-image.sh" --build-dir "$build_dir" > "$work/build.log" 2>&1
status=$?
cat "$work/build.log"
check $status "build-image.sh made $image"
[ $status -eq 0 ] || exit 1

run() { podman run --rm --network none "$@"; }
cli="$build_dir/src/cli"

out=$(run "$image" tessera --version 2>&1)
check $([ $? -eq 0 ] && [ "$out" = "$("$cli/tessera" --version)" ]; echo $?) "tessera --version in the image: $out"

host=$(python3 "$source_dir/tests/fixtures/materialize.py" --cached hgx-h100-dgx "$build_dir/fixtures")
check $? "fixture host hgx-h100-dgx materialized"
run -v "$host:/host:ro" "$image" tessera inventory --root /host --format json > "$work/in-image.json" 2> "$work/err"
check $? "tessera inventory --root /host in the image $(head -c 300 "$work/err")"
"$cli/tessera" inventory --root "$host" --format json > "$work/on-host.json"
python3 - "$work/in-image.json" "$work/on-host.json" <<'PY'
import json, sys
image, host = (json.load(open(p)) for p in sys.argv[1:3])
kinds = [d["kind"] for d in image["devices"]]
print(f"     image: {kinds.count('gpu')} GPUs, {kinds.count('nvswitch')} NVSwitches, driver "
      f"{(image.get('nvidia_driver') or {}).get('version')}, warnings {image['warnings']}")
# Equal apart from the root each was given.
image.pop("root"), host.pop("root")
sys.exit(0 if image == host and kinds.count("gpu") == 8 and kinds.count("nvswitch") == 4 else 1)
PY
check $? "the image's inventory of the HGX fixture equals the build tree's (8 GPUs and NVSwitches)"

out=$(run "$image" tessera-serve --help 2>&1)
check $([ $? -eq 0 ] && [[ "$out" == *"--backend"* ]]; echo $?) "tessera-serve --help in the image"
for binary in tessera-device-plugin tessera-dra-plugin tessera-lease-sync; do
  out=$(run "$image" "$binary" --help 2>&1)
  status=$?
  check $status "$binary --help in the image (every library it links is there)"
  [ $status -eq 0 ] || echo "$out" | head -3
done
out=$(run "$image" tessera dra-plugin --help 2>&1)
check $([ $? -eq 0 ] && [[ "$out" == *"--registry-dir"* ]]; echo $?) "tessera dra-plugin execs tessera-dra-plugin"
run "$image" /bin/sh -c true > /dev/null 2>&1
check $([ $? -ne 0 ]; echo $?) "no shell in the image (runtime libraries and the binaries only)"

size=$(podman image inspect --format '{{ .Size }}' "$image")
echo "     $image: $size bytes"
exit $(( failures > 0 ))
