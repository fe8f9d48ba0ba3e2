#!/usr/bin/env bash
# install_check.sh — installs a build into a temporary prefix and builds two consumer programs outside
# the tree with nothing but `pkg-config fsdp`, once against the shared and once against the static
# library, then runs them: install_consumer.c (fsdp.h) and install_gpt.c (trains GPT-2 through
# fsdp_gpt.h). Also checks that libfsdp.so exports exactly the functions the installed headers declare
# (the compiler's own list of their prototypes, -aux-info, against nm -D).
# Usage: install_check.sh BUILD_DIR SOURCE_DIR C_COMPILER [SANITIZE(0|1)]
set -euo pipefail
build=$1
src=$2
cc=${3:-cc}
sanitize=${4:-0}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "install_check: cmake --install $build failed (is the whole project built?)" >&2
    exit 1
fi
pc=$(find "$prefix" -name fsdp.pc -print -quit)
[ -n "$pc" ] || { echo "install_check: no fsdp.pc under $prefix" >&2; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
unset PKG_CONFIG_LIBDIR || true

# The .pc must point into the prefix it was installed to (relocatable), not the configure-time one.
libdir=$(pkg-config --variable=libdir fsdp)
includedir=$(pkg-config --variable=includedir fsdp)
[ -f "$includedir/fsdp.h" ] || { echo "install_check: fsdp.h not in includedir $includedir" >&2; exit 1; }
[ -f "$includedir/fsdp_gpt.h" ] || { echo "install_check: fsdp_gpt.h not in includedir $includedir" >&2; exit 1; }
[ -f "$includedir/fsdp_model.h" ] || { echo "install_check: fsdp_model.h not in includedir $includedir" >&2; exit 1; }
[ -f "$libdir/libfsdp.so" ] || { echo "install_check: libfsdp.so not in libdir $libdir" >&2; exit 1; }
[ -f "$libdir/libfsdp.a" ] || { echo "install_check: libfsdp.a not in libdir $libdir" >&2; exit 1; }

# Work outside the source and build trees, with a copy of the consumer.
mkdir "$tmp/work"
cp "$src/tests/core/install_consumer.c" "$src/tests/core/install_gpt.c" "$tmp/work/"
cd "$tmp/work"

# Installed API = exported API: the functions the installed headers declare, as the compiler lists
# them, are exactly the functions libfsdp.so exports (no kernels, no layer internals).
printf '#include <fsdp.h>\n#include <fsdp_gpt.h>\n#include <fsdp_model.h>\n' >headers.c
# shellcheck disable=SC2046
"$cc" -std=c11 $(pkg-config --cflags fsdp) -aux-info aux.txt -c headers.c -o headers.o
grep -F "$includedir/" aux.txt | sed -E 's|^/\*[^*]*\*/ *||' | grep -oE '[A-Za-z_][A-Za-z_0-9]* \(' |
    sed 's/ ($//' | sort -u >declared.txt
nm -D --defined-only "$libdir/libfsdp.so" | awk '{print $3}' | sed 's/@.*//' | sort -u >exported.txt
[ "$(wc -l <declared.txt)" -gt 100 ] || { echo "install_check: only $(wc -l <declared.txt) declarations found" >&2; exit 1; }
if ! diff declared.txt exported.txt >exports.diff; then
    echo "install_check: libfsdp.so exports differ from the installed headers (< declared only, > exported only):" >&2
    cat exports.diff >&2
    exit 1
fi
echo "install_check: libfsdp.so exports exactly the $(wc -l <declared.txt) functions of fsdp.h, fsdp_gpt.h and fsdp_model.h"
extra=()
# (from the list above: `nm | grep -q` fails under pipefail once grep stops reading, so this never held)
if grep -qx fsdp_comm_init exported.txt; then extra+=(-DHAVE_COMM); fi
# A sanitized libfsdp needs the sanitizer runtimes in the program too.
# shellcheck disable=SC2054
if [ "$sanitize" = 1 ]; then extra+=(-fsanitize=address,undefined); export ASAN_OPTIONS=detect_leaks=0; fi

# Shared: only pkg-config's flags plus an rpath so the installed copy is the one that runs.
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror "${extra[@]}" install_consumer.c -o consumer_shared \
    $(pkg-config --cflags --libs fsdp) -Wl,-rpath,"$libdir"
deps=$(ldd ./consumer_shared) # not piped into grep -q: its early exit would fail ldd under pipefail
grep -qF "$libdir/libfsdp.so" <<<"$deps" || {
    echo "$deps" >&2
    echo "install_check: consumer_shared does not load the installed libfsdp.so" >&2
    exit 1
}
./consumer_shared
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror "${extra[@]}" install_gpt.c -o gpt_shared \
    $(pkg-config --cflags --libs fsdp) -lm -Wl,-rpath,"$libdir"
./gpt_shared

# Static: libfsdp.a plus everything `pkg-config --static` says it needs (Requires.private, Libs.private).
static_libs=()
for f in $(pkg-config --static --libs fsdp); do [ "$f" = -lfsdp ] || static_libs+=("$f"); done
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror "${extra[@]}" install_consumer.c -o consumer_static \
    $(pkg-config --cflags fsdp) "$libdir/libfsdp.a" "${static_libs[@]}"
./consumer_static
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror "${extra[@]}" install_gpt.c -o gpt_static \
    $(pkg-config --cflags fsdp) "$libdir/libfsdp.a" "${static_libs[@]}"
./gpt_static
echo "install_check: ok (prefix $prefix)"
