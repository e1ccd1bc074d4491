#!/usr/bin/env bash
# check_deps_prefix.sh SOURCE_DIR: scripts/deps-prefix.sh on hand-made .deb files (dpkg-deb), as an offline host
# would run it: the unpacked tree becomes relocatable (pkg-config files and absolute links point into the prefix),
# the printed environment is right, a second run does nothing, and a library whose dependency is missing from the
# folder is reported with a non-zero exit instead of surfacing later as a link or load error.
set -euo pipefail
src=${1:?usage: check_deps_prefix.sh SOURCE_DIR}
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
arch=$(gcc -print-multiarch)

# deb NAME ROOT: builds $tmp/debs/NAME.deb from the tree ROOT.
deb() {
  mkdir -p "$2/DEBIAN" "$tmp/debs"
  printf 'Package: %s\nVersion: 1.0\nArchitecture: amd64\nMaintainer: test <t@example.org>\nDescription: test\n' "$1" \
    >"$2/DEBIAN/control"
  dpkg-deb --build --root-owner-group "$2" "$tmp/debs/$1.deb" >/dev/null
}

# libfoo: a library, its dev link as an absolute symlink (as some -dev packages ship), and a .pc file.
root=$tmp/foo
mkdir -p "$root/usr/lib/$arch/pkgconfig" "$root/usr/include"
printf 'int foo(void) { return 42; }\n' >"$tmp/foo.c"
gcc -shared -fPIC -Wl,-soname,libfoo.so.1 -o "$root/usr/lib/$arch/libfoo.so.1" "$tmp/foo.c"
ln -s "/usr/lib/$arch/libfoo.so.1" "$root/usr/lib/$arch/libfoo.so"
printf 'int foo(void);\n' >"$root/usr/include/foo.h"
# shellcheck disable=SC2016 # ${prefix} and ${libdir} are pkg-config's variables
printf 'prefix=/usr\nlibdir=${prefix}/lib/%s\nincludedir=${prefix}/include\n\nName: foo\nDescription: t\nVersion: 1.0\nLibs: -L${libdir} -lfoo\nCflags: -I${includedir}\n' \
  "$arch" >"$root/usr/lib/$arch/pkgconfig/foo.pc"
deb libfoo "$root"

prefix=$tmp/prefix
env_out=$("$src/scripts/deps-prefix.sh" "$tmp/debs" "$prefix" 2>"$tmp/log1") || { cat "$tmp/log1"; fail "first run failed"; }
grep -q "unpacking 1 .deb" "$tmp/log1" || fail "first run did not unpack: $(cat "$tmp/log1")"
grep -qx "prefix=$prefix/usr" "$prefix/usr/lib/$arch/pkgconfig/foo.pc" || fail "foo.pc still names /usr"
[[ $(readlink "$prefix/usr/lib/$arch/libfoo.so") == "$prefix/usr/lib/$arch/libfoo.so.1" ]] ||
  fail "the absolute link was not re-aimed: $(readlink "$prefix/usr/lib/$arch/libfoo.so")"

# The printed environment: a program built against the prefix through pkg-config links and runs.
(
  eval "$env_out"
  [[ $FT_DEPS_PREFIX == "$prefix" ]] || fail "FT_DEPS_PREFIX=$FT_DEPS_PREFIX"
  [[ $("$PKG_CONFIG" --variable=libdir foo) == "$prefix/usr/lib/$arch" ]] || fail "pkg-config libdir is not in the prefix"
  printf '#include <foo.h>\nint main(void) { return foo() == 42 ? 0 : 1; }\n' >"$tmp/main.c"
  gcc -I"$prefix/usr/include" "$tmp/main.c" -L"$prefix/usr/lib/$arch" -lfoo -o "$tmp/main"
  "$tmp/main" || fail "a program linked against the prefix did not run with the printed LD_LIBRARY_PATH"
)

# Idempotent: the same folder again only re-checks.
"$src/scripts/deps-prefix.sh" "$tmp/debs" "$prefix" >/dev/null 2>"$tmp/log2"
grep -q "up to date" "$tmp/log2" || fail "second run unpacked again: $(cat "$tmp/log2")"

# libbar needs libmissing, which no .deb in the folder provides: reported, non-zero exit.
root=$tmp/bar
mkdir -p "$root/usr/lib/$arch" "$tmp/stub"
printf 'int missing(void) { return 1; }\n' >"$tmp/missing.c"
gcc -shared -fPIC -Wl,-soname,libmissing.so.1 -o "$tmp/stub/libmissing.so" "$tmp/missing.c"
printf 'int missing(void);\nint bar(void) { return missing(); }\n' >"$tmp/bar.c"
gcc -shared -fPIC -Wl,-soname,libbar.so.1 -Wl,--no-as-needed -o "$root/usr/lib/$arch/libbar.so.1" "$tmp/bar.c" \
  -L"$tmp/stub" -lmissing
deb libbar "$root"
if "$src/scripts/deps-prefix.sh" "$tmp/debs" "$prefix" >/dev/null 2>"$tmp/log3"; then
  fail "a library with an unresolved dependency was accepted"
fi
grep -q "libbar.so.1: .*libmissing.so.1 => not found" "$tmp/log3" || fail "the missing library was not named: $(cat "$tmp/log3")"
echo "deps-prefix: relocated .pc and links, working environment, idempotent, missing dependency reported"
