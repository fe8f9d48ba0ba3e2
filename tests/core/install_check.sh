#!/usr/bin/env bash
# install_check.sh — installs a build into a temporary prefix and builds a consumer program outside the
# tree with nothing but `pkg-config fsdp`, once against the shared and once against the static library,
# then runs both. Usage: install_check.sh BUILD_DIR SOURCE_DIR C_COMPILER [SANITIZE(0|1)]
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
[ -f "$libdir/libfsdp.so" ] || { echo "install_check: libfsdp.so not in libdir $libdir" >&2; exit 1; }
[ -f "$libdir/libfsdp.a" ] || { echo "install_check: libfsdp.a not in libdir $libdir" >&2; exit 1; }

# Work outside the source and build trees, with a copy of the consumer.
mkdir "$tmp/work"
cp "$src/tests/core/install_consumer.c" "$tmp/work/"
cd "$tmp/work"
extra=()
if nm -D --defined-only "$libdir/libfsdp.so" | grep -qw fsdp_comm_init; then extra+=(-DHAVE_COMM); fi
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

# Static: libfsdp.a plus everything `pkg-config --static` says it needs (Requires.private, Libs.private).
static_libs=()
for f in $(pkg-config --static --libs fsdp); do [ "$f" = -lfsdp ] || static_libs+=("$f"); done
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror "${extra[@]}" install_consumer.c -o consumer_static \
    $(pkg-config --cflags fsdp) "$libdir/libfsdp.a" "${static_libs[@]}"
./consumer_static
echo "install_check: ok (prefix $prefix)"
