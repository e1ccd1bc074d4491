#!/usr/bin/env bash
# assemble-runtime.sh [--link] BUILD_DIR OUT_DIR: lays out everything `finetune` needs at run time in OUT_DIR:
#   OUT_DIR/bin/finetune      the binary, its RUNPATH set to $ORIGIN/../lib (no paths of the build machine left)
#   OUT_DIR/lib/              its shared-library closure (ldd) plus the dlopen'd libraries that
#                             docker/runtime-libs.txt names, minus that file's exclusions (glibc, GCC runtime, driver)
#   OUT_DIR/configs/          the project's configs/
#   OUT_DIR/share/fonts/      DejaVu Sans for the charts, found through OUT_DIR/etc/fonts/fonts.conf (set
#   OUT_DIR/etc/fonts/        FONTCONFIG_FILE to it; docker/Dockerfile does), when the binary links fontconfig (cairo)
#   OUT_DIR/MANIFEST.txt      each library and where it came from
# Run it in the environment the binary was built in (the same LD_LIBRARY_PATH), so ldd resolves as the build did.
# The result runs with LD_LIBRARY_PATH=OUT_DIR/lib and nothing else of the build: docker/Dockerfile copies exactly
# this directory; tests/docker checks it on CPU; scripts/verify-runtime-gpu.sh on a GPU host.
# --link hard-links instead of copying where possible (same file system; for tests).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
link=0
[[ ${1:-} == --link ]] && { link=1; shift; }
build=${1:?usage: assemble-runtime.sh [--link] BUILD_DIR OUT_DIR}
out=${2:?usage: assemble-runtime.sh [--link] BUILD_DIR OUT_DIR}
rules=$root/docker/runtime-libs.txt
binary=$build/bin/finetune
[[ -x $binary ]] || { echo "assemble-runtime: no $binary; build the finetune target first" >&2; exit 1; }

excludes=()
besides=()   # "ANCHOR GLOB..." lines
while read -r verb rest; do
  case $verb in
    ''|\#*) ;;
    exclude|driver) read -ra words <<<"$rest"; excludes+=("${words[@]}") ;;
    beside) besides+=("$rest") ;;
    *) echo "assemble-runtime: $rules: unknown rule '$verb'" >&2; exit 1 ;;
  esac
done <"$rules"

# excluded NAME: NAME matches an exclude glob (the globs are meant to match, hence unquoted).
# shellcheck disable=SC2053
excluded() { local g; for g in "${excludes[@]}"; do [[ $1 == $g ]] && return 0; done; return 1; }

declare -A found=()   # soname -> resolved path
order=()
add_closure() { # add_closure FILE: FILE's ldd closure into found[]; an unresolved, non-excluded library is fatal
  local name arrow path rest
  while read -r name arrow path rest; do
    [[ $arrow == "=>" ]] || continue       # the loader itself and the vdso have no "=>"
    excluded "$name" && continue
    if [[ $path == not ]]; then
      echo "assemble-runtime: $(basename "$1") needs $name, which is not found (set LD_LIBRARY_PATH as for the build)" >&2
      exit 1
    fi
    [[ -n ${found[$name]:-} ]] && continue
    found[$name]=$path
    order+=("$name")
  done < <(ldd "$1")
}

add_closure "$binary"
# Fixed point over the dlopen rules: an added library can bring an anchor of another rule (NVRTC via caffe2_nvrtc).
changed=1
while ((changed)); do
  changed=0
  for rule in "${besides[@]}"; do
    read -ra words <<<"$rule"
    anchor=${words[0]}
    [[ -n ${found[$anchor]:-} ]] || continue
    dir=$(dirname "${found[$anchor]}")
    for glob in "${words[@]:1}"; do
      for file in "$dir"/$glob; do
        [[ -e $file ]] || continue
        name=$(basename "$file")
        [[ -n ${found[$name]:-} ]] && continue
        excluded "$name" && continue
        found[$name]=$file
        order+=("$name")
        add_closure "$file"
        changed=1
      done
    done
  done
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
put() { # put SRC DEST: copy (dereferencing links), or hard-link with --link
  if ((link)) && ln "$(readlink -f "$1")" "$2" 2>/dev/null; then return; fi
  cp -L "$1" "$2"
}
for name in "${order[@]}"; do
  put "${found[$name]}" "$out/lib/$name"
  printf '%s\t%s\n' "$name" "$(readlink -f "${found[$name]}")"
done >"$out/MANIFEST.txt"
cp "$binary" "$out/bin/finetune"
cmake -DFILE="$out/bin/finetune" -P "$root/docker/set-runpath.cmake"
cp -r "$root/configs" "$out/configs"
# cairo draws the charts' text through fontconfig, and the runtime base image has neither fonts nor /etc/fonts:
# carry DejaVu Sans (fonts-dejavu-core, third_party/apt-packages.txt) and a fonts.conf that finds it relative to
# itself, so the directory can move.
if [[ -n ${found[libfontconfig.so.1]:-} ]]; then
  fonts=/usr/share/fonts/truetype/dejavu
  mkdir -p "$out/share/fonts" "$out/etc/fonts"
  for f in DejaVuSans.ttf DejaVuSans-Bold.ttf; do
    [[ -f $fonts/$f ]] || { echo "assemble-runtime: no $fonts/$f; install fonts-dejavu-core" >&2; exit 1; }
    cp "$fonts/$f" "$out/share/fonts/$f"
  done
  cp /usr/share/doc/fonts-dejavu-core/copyright "$out/share/fonts/COPYRIGHT.DejaVu" 2>/dev/null || true
  cat >"$out/etc/fonts/fonts.conf" <<'XML'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<!-- The fonts of finetune's runtime file set (scripts/assemble-runtime.sh); use with FONTCONFIG_FILE=this file. -->
<fontconfig>
  <dir prefix="relative">../../share/fonts</dir>
  <cachedir prefix="xdg">fontconfig</cachedir>
  <alias>
    <family>sans-serif</family>
    <prefer><family>DejaVu Sans</family></prefer>
  </alias>
</fontconfig>
XML
fi
echo "assemble-runtime: $(wc -l <"$out/MANIFEST.txt") libraries, $(du -sh "$out" | cut -f1) in $out" >&2
