#!/usr/bin/env bash
# Every descriptor tessera opens is close-on-exec from the call that makes it (common/cloexec.h).
# Fails on a raw call in src/ that makes a descriptor without the flag (within the call's first
# three lines): open/openat/creat without O_CLOEXEC, socket/socketpair/accept4 without
# SOCK_CLOEXEC, accept, pipe, dup, fopen/popen/fdopen without "e" in the mode, mkstemp, the
# epoll/inotify/eventfd/timerfd/signalfd/memfd creators without their CLOEXEC flag, iostreams on
# files, and Boost.Asio's own socket opening (async_accept, accept, acceptor open, connect).
# Known exceptions live in cloexec_allowlist.txt as "path|text on the line|reason"; an entry that
# matches nothing fails too, so the list stays true.
set -euo pipefail
root="${1:?usage: cloexec_sources_test.sh SOURCE_DIR}"
allowlist="$(cd "$(dirname "$0")" && pwd)/cloexec_allowlist.txt"
cd "$root"

# POSIX extended regular expressions (mawk): [[:space:]], no \s or \b.
sp='[[:space:]]*'
calls='(open|openat|creat|socket|socketpair|accept|accept4|pipe|dup|fopen|popen|fdopen|mkstemp|mkostemp|epoll_create|epoll_create1|inotify_init|inotify_init1|eventfd|timerfd_create|signalfd|memfd_create)'
raw="(::|[=(,!]$sp|return[[:space:]]+|^$sp)$calls$sp\\("
asio="async_accept$sp\\(|acceptor_?\\.(accept|open)$sp\\(|(asio|net)::(async_)?connect$sp\\(|\\.async_connect$sp\\("
streams='std::(i|o)?fstream[^A-Za-z_]'

# One awk over every file: each file's lines are judged when the next file begins (and at the end).
found=$(find src -type f \( -name '*.cc' -o -name '*.h' -o -name '*.c' \) -print0 | sort -z |
  xargs -0 awk -v raw="$raw" -v asio="$asio" -v streams="$streams" '
    function judge(file, n,    i, text, window, bad) {
      for (i = 1; i <= n; ++i) {
        text = line[i]
        if (text ~ /^[[:space:]]*(\/\/|\*|\/\*)/) continue  # comments
        window = text "\n" line[i + 1] "\n" line[i + 2]
        bad = 0
        if (text ~ raw) {
          if (text ~ /(fopen|popen|fdopen)[[:space:]]*\(/) {
            bad = (window !~ /"[rwa][b+]*e[b+]*"/)
          } else if (text ~ /(::|[^A-Za-z_])(accept|pipe|dup|mkstemp|epoll_create|inotify_init)[[:space:]]*\(/) {
            bad = 1  # no flags argument at all: accept4, pipe2, fcntl F_DUPFD_CLOEXEC, ...
          } else {
            bad = (window !~ /CLOEXEC/)
          }
        }
        if (text ~ asio || text ~ streams) bad = 1
        if (bad) printf "%s:%d:%s\n", file, i, text
      }
      split("", line)
    }
    FNR == 1 && NR > 1 { judge(previous, count) }
    { line[FNR] = $0; count = FNR; previous = FILENAME }
    END { if (NR > 0) judge(previous, count) }')

status=0
declare -A used=()
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  file="${hit%%:*}"
  text="${hit#*:*:}"
  allowed=false
  while IFS='|' read -r path needle reason; do
    [[ -z "$path" || "$path" == \#* ]] && continue
    if [ "$path" = "$file" ] && [[ "$text" == *"$needle"* ]]; then
      allowed=true
      used["$path|$needle"]=1
    fi
  done <"$allowlist"
  if ! $allowed; then
    echo "not close-on-exec: $hit" >&2
    status=1
  fi
done <<<"$found"

while IFS='|' read -r path needle reason; do
  [[ -z "$path" || "$path" == \#* ]] && continue
  if [ -z "${used["$path|$needle"]:-}" ]; then
    echo "allowlist entry matches nothing (remove it): $path|$needle" >&2
    status=1
  fi
done <"$allowlist"
[ "$status" = 0 ] && echo "every descriptor-making call in src/ is close-on-exec or allowlisted"
exit "$status"
