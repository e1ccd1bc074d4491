#!/usr/bin/env bash
# deps-prefix.sh DEB_DIR PREFIX: unpacks every DEB_DIR/*.deb (from scripts/fetch-debs.sh) into PREFIX with dpkg -x,
# makes the unpacked tree relocatable (pkg-config files and absolute symlinks point into PREFIX), checks that every
# shared library there resolves its dependencies, and prints the environment to use, for eval:
#   eval "$(scripts/deps-prefix.sh .deps /opt/deps)"
# sets FT_DEPS_PREFIX (read by third_party/dependencies.cmake), LD_LIBRARY_PATH, PKG_CONFIG_PATH and PKG_CONFIG (see the
# end). Idempotent: a second run with the same .deb files only re-checks.
# Messages go to stderr, so stdout is only the environment.
set -euo pipefail
debs=$(cd "${1:?usage: deps-prefix.sh DEB_DIR PREFIX}" && pwd)
prefix=${2:?usage: deps-prefix.sh DEB_DIR PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
multiarch=$(gcc -print-multiarch 2>/dev/null || true)
multiarch=${multiarch:-x86_64-linux-gnu}
libdir=$prefix/usr/lib/$multiarch

shopt -s nullglob
files=("$debs"/*.deb)
((${#files[@]})) || { echo "deps-prefix: no .deb files in $debs (run scripts/fetch-debs.sh $debs on a host with apt)" >&2; exit 1; }
stamp=$prefix/.ft-deps.stamp
want=$(for f in "${files[@]}"; do printf '%s %s\n' "$(basename "$f")" "$(stat -c %s "$f")"; done | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "deps-prefix: unpacking ${#files[@]} .deb files into $prefix" >&2
  for f in "${files[@]}"; do dpkg -x "$f" "$prefix"; done
  # .pc files name prefix=/usr; point them at the unpacked tree so pkg-config answers with PREFIX paths.
  for pc in "$prefix"/usr/lib/"$multiarch"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
    sed -i -e "s|^prefix=/usr\$|prefix=$prefix/usr|" -e "s|=/usr/|=$prefix/usr/|" "$pc"
  done
  # Absolute symlinks (e.g. lib.so -> /usr/lib/...) would point at the host's files; re-aim them into the prefix.
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    ln -sfn "$prefix$target" "$link"
  done < <(find "$prefix" -type l -lname '/*' -not -lname "$prefix/*" -print0)
  echo "$want" >"$stamp"
else
  echo "deps-prefix: $prefix is up to date with $debs" >&2
fi

# Every shared library of the prefix must find its dependencies in the prefix or on the host.
missing=0
for so in "$libdir"/*.so.*; do
  [[ -L $so ]] && continue
  while read -r line; do
    echo "deps-prefix: $(basename "$so"): $line" >&2
    missing=1
  done < <(LD_LIBRARY_PATH=$libdir ldd "$so" 2>/dev/null | grep 'not found' || true)
done
((missing == 0)) || { echo "deps-prefix: unresolved libraries above; fetch the missing packages too" >&2; exit 1; }

echo "export FT_DEPS_PREFIX='$prefix'"
echo "export LD_LIBRARY_PATH='$libdir'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export PKG_CONFIG_PATH='$libdir/pkgconfig:$prefix/usr/share/pkgconfig'\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
# Pin the pkg-config CMake uses (it would otherwise find the prefix's own, which needs LD_LIBRARY_PATH): the host's,
# else the prefix's pkgconf behind a wrapper that carries its library path, so a later re-configure run from
# ninja, without this environment, still works.
if command -v pkg-config >/dev/null; then
  echo "export PKG_CONFIG='$(command -v pkg-config)'"
elif [[ -x $prefix/usr/bin/pkgconf ]]; then
  wrapper=$prefix/usr/bin/ft-pkg-config
  # shellcheck disable=SC2016 # the wrapper expands LD_LIBRARY_PATH when it runs
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$libdir" \
    "$prefix/usr/bin/pkgconf" >"$wrapper"
  chmod +x "$wrapper"
  echo "export PKG_CONFIG='$wrapper'"
fi
