#!/usr/bin/env bash
# Renders deploy/ from its one source, the Helm chart deploy/helm/tessera, with real helm:
#   - deploy/crds/*.yaml (equal to the C++ builders' CRDs) are copied into the chart's crds/;
#   - `helm template` with the chart's default values writes deploy/manifests/<template>.yaml,
#     the plain manifests for `kubectl apply -f deploy/crds -f deploy/manifests`;
#   - the DeviceClasses template alone is deploy/dra/deviceclasses.yaml, next to the standalone
#     DRA plugin DaemonSet and RBAC.
# usage: render-manifests.sh [--check]
#   --check  change nothing; exit 1 (naming the files) when a committed file differs
# HELM overrides the helm binary (default /usr/local/bin/helm, installed by scripts/setup-test-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
helm=${HELM:-/usr/local/bin/helm}
chart=deploy/helm/tessera
namespace=tessera-system
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/crds" "$out/manifests" "$out/dra"
cp deploy/crds/*.yaml "$out/crds/"
# The chart's crds/ must be in place before helm reads the chart.
if [ $check -eq 0 ]; then
  rm -rf "$chart/crds" && mkdir -p "$chart/crds" && cp deploy/crds/*.yaml "$chart/crds/"
fi
"$helm" template tessera "$chart" --namespace "$namespace" --output-dir "$out/helm" >/dev/null
header="# Rendered by scripts/render-manifests.sh (helm template) from deploy/helm/tessera - do not edit."
# helm starts every file with a document separator; the header comment takes its place.
for file in "$out"/helm/tessera/templates/*.yaml; do
  { echo "$header"; sed '1{/^---$/d}' "$file"; } > "$out/manifests/$(basename "$file")"
done
{ echo "$header"; "$helm" template tessera "$chart" --namespace "$namespace" \
    --show-only templates/deviceclasses.yaml | sed '1{/^---$/d}'; } > "$out/dra/deviceclasses.yaml"

stale=0
compare() {  # compare DIR_OR_FILE_RENDERED COMMITTED
  if ! diff -r -q "$1" "$2" >/dev/null 2>&1; then
    echo "stale: $2"
    stale=1
  fi
}
if [ $check -eq 1 ]; then
  compare "$out/crds" "$chart/crds"
  compare "$out/manifests" deploy/manifests
  compare "$out/dra/deviceclasses.yaml" deploy/dra/deviceclasses.yaml
  exit $stale
fi
rm -rf deploy/manifests && cp -r "$out/manifests" deploy/manifests
cp "$out/dra/deviceclasses.yaml" deploy/dra/deviceclasses.yaml
