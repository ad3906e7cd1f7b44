#!/usr/bin/env bash
# Builds the container image the manifests name (ghcr.io/tessera/tessera:<chart appVersion>) from
# Debian packages and the binaries in the build tree, with no registry involved:
#   1. the Debian runtime libraries: the packages that own the shared libraries the binaries load
#      (from ldd and dpkg), unpacked with their dependencies by mmdebstrap (variant extract: no
#      shell, no package manager) from the Debian 12 mirror; cached as
#      build/image/base-<hash of the package list>.tar;
#   2. documentation and shared objects that no binary loads dropped (glibc kept whole), the
#      binaries, stripped, added under /usr/local/bin, plus /etc/passwd, /etc/group and /tmp, and
#      an ld.so.cache made with ldconfig -r;
#   3. `podman import` of that tarball, labelled with a fingerprint of the base and the binaries.
# An image whose fingerprint matches is kept as it is, so a rerun with unchanged binaries costs
# a few seconds; changed binaries reuse the cached base and skip mmdebstrap.
#
# usage: build-image.sh [--build-dir DIR] [--cache-dir DIR] [--image NAME] [--force]
#   --build-dir  the CMake build tree holding src/cli/<binaries> (default ./build)
#   --cache-dir  where the Debian base tarball is kept (default <build-dir>/image)
#   --image      name:tag (default ghcr.io/tessera/tessera:<appVersion of deploy/helm/tessera>)
#   --force      rebuild even when the fingerprint matches (the cached base is still used)
# TESSERA_DEBIAN_MIRROR overrides http://deb.debian.org (…/debian and …/debian-security).
# Prints the image name and its size. Run as root (mmdebstrap, podman).
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
build_dir=build
image=""
cache=""
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --cache-dir) cache=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --force) force=1; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--cache-dir DIR] [--image NAME] [--force]" >&2; exit 2 ;;
  esac
done
build_dir=$(cd "$build_dir" && pwd)
if [ -z "$image" ]; then
  version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/helm/tessera/Chart.yaml)
  image="ghcr.io/tessera/tessera:$version"
fi
binaries=(tessera tessera-serve tessera-device-plugin tessera-dra-plugin tessera-lease-sync)
paths=()
for b in "${binaries[@]}"; do
  path="$build_dir/src/cli/$b"
  [ -x "$path" ] || { echo "build-image: $path missing (bash scripts/build.sh --daemons)" >&2; exit 1; }
  paths+=("$path")
done
mirror=${TESSERA_DEBIAN_MIRROR:-http://deb.debian.org}
sources=("deb $mirror/debian bookworm main"
         "deb $mirror/debian bookworm-updates main"
         "deb $mirror/debian-security bookworm-security main")
cache=${cache:-$build_dir/image}
mkdir -p "$cache"
# One build at a time per cache (parallel test runs share it).
exec 9>"$cache/lock"
flock 9

# The Debian packages owning every shared library the binaries load. One dpkg-query for all of
# them: each library is asked for under its ldd path, its real path and both with and without
# /usr (merged /usr: dpkg records whichever the package ships).
library_packages() {
  local libs lib real candidates=() owners
  libs=$(ldd "${paths[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/lib64\// {print $1}' | sort -u)
  for lib in $libs; do
    real=$(readlink -f "$lib")
    for p in "$lib" "$real"; do candidates+=("$p" "${p#/usr}" "/usr${p#/usr}"); done
  done
  owners=$(dpkg-query -S "${candidates[@]}" 2>/dev/null || true)
  owned=$(echo "$owners" | sed 's/^[^ ]* //; s#^/usr##')
  for lib in $libs; do
    real=$(readlink -f "$lib")
    if ! echo "$owned" | grep -q -F -x -e "${lib#/usr}" -e "${real#/usr}"; then
      echo "build-image: no Debian package owns $lib" >&2
      return 1
    fi
  done
  echo "$owners" | sed 's/[:,].*//' | sort -u
}

# File names of the shared objects the binaries load: the ldd path's name and its target's.
loaded_libraries() {
  local lib
  for lib in $(ldd "${paths[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    basename "$lib"
    basename "$(readlink -f "$lib")"
  done | sort -u
}
binaries_hash=$(sha256sum "${paths[@]}" | cut -d' ' -f1 | sha256sum | cut -c1-32)
# The package list depends only on the binaries: kept per binaries hash (ldd + dpkg are slow).
if [ -s "$cache/packages-$binaries_hash" ]; then
  packages=$(cat "$cache/packages-$binaries_hash")
else
  packages=$(library_packages) || exit 1
  rm -f "$cache"/packages-* "$cache"/loaded-*
  loaded_libraries > "$cache/loaded-$binaries_hash"
  echo "$packages" > "$cache/packages-$binaries_hash"
fi
# Bump the recipe tag when the steps below change what the base holds, the assembly tag when
# they change what is added to or removed from it.
recipe="extract-nodocs-ldconfig-2"
assembly="3"
base_key=$( { echo "$recipe"; printf '%s\n' "${sources[@]}"; echo "$packages"; } | sha256sum | cut -c1-16)
fingerprint=$(echo "$base_key $assembly $binaries_hash" | sha256sum | cut -c1-32)

current=$(podman image inspect --format '{{ index .Config.Labels "dev.tessera.image.fingerprint" }}' "$image" 2>/dev/null || true)
if [ $force -eq 0 ] && [ "$current" = "$fingerprint" ]; then
  echo "build-image: $image is up to date ($fingerprint)"
else
  base="$cache/base-$base_key.tar"
  if [ ! -s "$base" ]; then
    echo "build-image: Debian base with: $(echo $packages)"
    rm -f "$cache"/base-*.tar
    mmdebstrap --quiet --variant=extract --include="$(echo $packages | tr ' ' ',')" \
      bookworm "$cache/partial.tar" "${sources[@]}"
    mv "$cache/partial.tar" "$base"
  fi
  root=$(mktemp -d "$cache/root.XXXXXX")
  trap 'rm -rf "$root" "$root.tar"' EXIT
  tar -xf "$base" -C "$root"
  rm -rf "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale \
    "$root"/usr/share/lintian "$root"/var/cache/apt "$root"/var/lib/apt/lists
  # The library packages also ship shared objects nothing here loads (libgrpc with TLS,
  # libprotoc, libdb, ...): dropped, except glibc's own files and plugin directories.
  { cat "$cache/loaded-$binaries_hash"; dpkg-query -L libc6 | xargs -n1 basename; } | sort -u > "$root.keep"
  for dir in "$root/lib/x86_64-linux-gnu" "$root/usr/lib/x86_64-linux-gnu"; do
    [ -d "$dir" ] && [ ! -L "$dir" ] || continue
    (cd "$dir" && find . -maxdepth 1 \( -type f -o -type l \) -name '*.so*' -printf '%f\n' |
       { grep -vxF -f "$root.keep" || true; } | xargs -r rm -f --)
  done
  rm -f "$root.keep"
  mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp"
  chmod 1777 "$root/tmp"
  for path in "${paths[@]}"; do
    strip --strip-unneeded -o "$root/usr/local/bin/$(basename "$path")" "$path"
  done
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' \
    > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
  ldconfig -r "$root"
  tar -C "$root" --numeric-owner -cf "$root.tar" .
  podman import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'CMD ["/usr/local/bin/tessera", "--help"]' \
    --change "LABEL dev.tessera.image.fingerprint=$fingerprint" \
    --change "LABEL org.opencontainers.image.title=tessera" \
    "$root.tar" "$image" >/dev/null
  echo "build-image: built $image ($fingerprint)"
fi
size=$(podman image inspect --format '{{ .Size }}' "$image")
echo "build-image: $image $size bytes ($(( size / 1024 / 1024 )) MiB)"
