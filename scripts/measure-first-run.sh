#!/usr/bin/env bash
# Measures a newcomer's first minutes from a fresh clone of this repository (its committed HEAD),
# with ccache off, and prints the figures:
#   set-up   `bash scripts/setup.sh`: apt-get update, download and install of every package
#            building and running need (only with --fresh-root, see below);
#   build    `bash scripts/build.sh`: the README's first command's build;
#   serve    `./build/src/cli/tessera serve` until GET /healthz answers 200;
#   tests    `bash scripts/test.sh`: the whole test command (only with --tests).
# --fresh-root does all of it inside a fresh Debian 12 root (mmdebstrap --variant=minbase from
# Debian's mirror, then chroot; making the root is not timed, ~200 MB are downloaded), so that
# set-up is measured as on a new machine; otherwise everything runs on this machine, whose
# packages are installed already, and set-up is not measured.
# Run as root on an otherwise idle machine; the clone and the root are removed after.
#   bash scripts/measure-first-run.sh [--fresh-root] [--tests]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
fresh=false tests=false
for arg in "$@"; do
  case "$arg" in
    --fresh-root) fresh=true ;;
    --tests) tests=true ;;
    *) echo "usage: bash scripts/measure-first-run.sh [--fresh-root] [--tests]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /var/tmp/tessera-first-run-XXXXXX)
root=$work/root
serve_pid=
cleanup() {
  [ -z "$serve_pid" ] || stop_serve
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
export CCACHE_DISABLE=1

if $fresh; then
  mmdebstrap --quiet --variant=minbase bookworm "$root" http://deb.debian.org/debian
  mount -t proc proc "$root/proc"
  checkout=$root/tmp/tessera scratch=/tmp  # scratch as the commands see it
  run() { chroot "$root" bash -c "cd /tmp/tessera && $1"; }
else
  checkout=$work/tessera scratch=$work
  run() { bash -c "cd '$checkout' && $1"; }
fi
git clone --quiet --no-hardlinks "$repo" "$checkout"
echo "clone: $(git -C "$checkout" log -1 --format='%h %s')"
echo "machine: $(nproc) cores, $(free -g | awk '/^Mem/{print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"

setup_s=0
if $fresh; then
  start=$(now)
  run "bash scripts/setup.sh" > "$work/setup.log" 2>&1 || { tail -n 20 "$work/setup.log"; exit 1; }
  setup_s=$(since "$start")
  printf 'set-up: %.0f s (%s packages in the fresh root)\n' "$setup_s" \
    "$(chroot "$root" dpkg-query -W -f='.\n' | grep -c .)"
fi

start=$(now)
run "bash scripts/build.sh" > "$work/build.log" 2>&1 || { tail -n 20 "$work/build.log"; exit 1; }
build_s=$(since "$start")
printf 'build: %.0f s (%s compile steps)\n' "$build_s" "$(cut -f4 "$checkout/build/.ninja_log" | grep -c '\.o$')"

start=$(now)
# exec all the way down (bash, tessera, tessera-serve): $! is the server.
run "exec ./build/src/cli/tessera serve --listen 127.0.0.1:0 --data-dir $scratch/first-run-data \
  --port-file $scratch/first-run-port" > "$work/serve.log" 2>&1 &
serve_pid=$!
port_file=$($fresh && echo "$root$scratch/first-run-port" || echo "$scratch/first-run-port")
healthy=false
for _ in $(seq 1 1200); do
  if [ -s "$port_file" ] && exec 3<>"/dev/tcp/127.0.0.1/$(cat "$port_file")" 2>/dev/null; then
    printf 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
    head -n 1 <&3 | grep -q ' 200 ' && healthy=true
    exec 3<&-
    $healthy && break
  fi
  sleep 0.05
done
serve_s=$(since "$start")
$healthy || { echo "serve never answered /healthz:"; tail -n 20 "$work/serve.log"; exit 1; }
printf 'serve: %.2f s to /healthz 200\n' "$serve_s"
printf 'first command: %.0f s = set-up %.0f + build %.0f + serve %.2f%s\n' \
  "$(echo "$setup_s + $build_s + $serve_s" | bc)" "$setup_s" "$build_s" "$serve_s" \
  "$($fresh || echo ' (set-up not measured: without --fresh-root)')"
stop_serve() {
  # $! is the shell that started it; the server below it is found by its data directory.
  [ -z "$serve_pid" ] || kill "$serve_pid" 2>/dev/null || true
  pkill -f -- "--data-dir $scratch/first-run-data" 2>/dev/null || true
  serve_pid=
}
stop_serve

if $tests; then
  start=$(now)
  status=0
  run "bash scripts/test.sh" > "$work/test.log" 2>&1 || status=$?
  printf 'tests: %.0f s, exit %s, %s\n' "$(since "$start")" "$status" \
    "$(grep '^summary:' "$work/test.log" | tail -n 1)"
  # The clone goes; a failing run's log stays for reading.
  if [ "$status" != 0 ]; then
    cp "$work/test.log" /var/tmp/tessera-first-run-tests.log
    echo "test log: /var/tmp/tessera-first-run-tests.log"
  fi
fi
