#!/usr/bin/env bash
# apt-install.sh PACKAGE...: installs the packages not installed yet (no recommends).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
