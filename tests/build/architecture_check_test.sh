#!/usr/bin/env bash
# The architecture check fails on each kind of offence: a copy of the tree is doctored one way at a
# time and scripts/architecture.py --check must exit 1 naming it (and pass on the clean copy).
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fresh() {
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  cp -r "$source_dir/src" "$source_dir/scripts" "$source_dir/docs" "$work/tree/"
}
expect_offence() {  # <what> <pattern>
  if out=$(python3 "$work/tree/scripts/architecture.py" --check --root "$work/tree" 2>&1); then
    echo "FAIL: $1 passed the check"; exit 1
  fi
  grep -q -- "$2" <<<"$out" || { echo "FAIL: $1 not named; got:"; echo "$out"; exit 1; }
  echo "ok: $1"
}

fresh
python3 "$work/tree/scripts/architecture.py" --check --root "$work/tree" >/dev/null \
  || { echo "FAIL: the clean tree does not pass"; exit 1; }
echo "ok: clean tree"

fresh  # a low module includes one above it
echo '#include "api/api.h"' >> "$work/tree/src/common/error.cc"
expect_offence "common including api" "common (layer 0) imports api"

fresh  # a low module links one above it
echo 'target_link_libraries(tessera_common PRIVATE tessera_serve)' >> "$work/tree/src/common/CMakeLists.txt"
expect_offence "common linking serve" "links tessera_serve"

fresh  # a main back in a module
printf 'int main(int argc, char** argv) { return 0; }\n' > "$work/tree/src/cli/stray_main.cc"
expect_offence "a main in src/cli" "stray_main.cc: a main outside src/programs/"

fresh  # an executable defined by a module
echo 'add_executable(tessera-stray stray.cc)' >> "$work/tree/src/tls/CMakeLists.txt"
expect_offence "an executable in src/tls" "executable tessera-stray outside"

fresh  # a composition root grown long
for i in $(seq 200); do echo "// line $i"; done >> "$work/tree/src/programs/tessera/main.cc"
expect_offence "a long main.cc" "tessera/main.cc: .* lines, a composition root"

fresh  # a long function, then the same with a reason
{ echo 'int LongOne() {'; for i in $(seq 90); do echo "  int v$i = $i;"; done; echo '  return 0;'; echo '}'; } \
  > "$work/tree/src/tls/long_one.cc"
expect_offence "a 93-line function" "LongOne is 93 lines"
{ echo '// long: a table kept whole'; cat "$work/tree/src/tls/long_one.cc"; } > "$work/tree/src/tls/x" &&
  mv "$work/tree/src/tls/x" "$work/tree/src/tls/long_one.cc"
python3 "$work/tree/scripts/architecture.py" --check --root "$work/tree" >/dev/null \
  || { echo "FAIL: a function with a // long: reason was refused"; exit 1; }
echo "ok: a long function with its reason"

fresh  # a new module without a line in src/modules.txt
mkdir -p "$work/tree/src/stray" && echo 'add_library(tessera_stray STATIC)' > "$work/tree/src/stray/CMakeLists.txt"
expect_offence "an unlisted module" "src/stray: has a CMakeLists.txt but no line"

fresh  # the map out of date
echo "edited by hand" >> "$work/tree/docs/architecture.md"
expect_offence "a stale map" "docs/architecture.md is out of date"
