#!/usr/bin/env bash
# fetch-debs.sh DIR: downloads into DIR the Debian 12 .deb files of the C++ libraries the build needs, for a host
# without a package source (scripts/deps-prefix.sh unpacks them there; scripts/gpu-host-build.sh does both steps).
#
# The package list is third_party/apt-packages.txt, the same file scripts/setup.sh installs from. Left out are the
# tools an offline GPU host brings itself (HOST_TOOLS below: compiler, CMake, Ninja, Python, git). Each remaining
# package is fetched with the packages it depends on that are built from the same Debian source (so libyaml-cpp-dev
# brings libyaml-cpp0.7, libgtest-dev brings googletest); libc, libstdc++ and other base libraries are never fetched.
# Also left out: cairo and its font (NOT_FETCHED), whose library chain (pixman, fontconfig, freetype, libpng, X11)
# spans many Debian sources; scripts/gpu-host-build.sh uses the host's cairo if it has one, else builds without plots.
# Writes DIR/MANIFEST.txt (package=version, one a line). Needs apt-get and current package lists (apt-get update).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:?usage: fetch-debs.sh DIR}
HOST_TOOLS=" build-essential cmake ninja-build ccache python3-venv git "
NOT_FETCHED=" libcairo2-dev fonts-dejavu-core "

field() { # field PACKAGE NAME: one field of the candidate version's record
  apt-cache show --no-all-versions "$1" 2>/dev/null | sed -n "s/^$2: //p" | head -n1
}
source_of() { local s; s=$(field "$1" Source); s=${s%% *}; echo "${s:-$1}"; }

declare -A chosen=()
queue=()
while read -r pkg; do
  [[ -z $pkg || $pkg == \#* || $HOST_TOOLS == *" $pkg "* || $NOT_FETCHED == *" $pkg "* ]] && continue
  queue+=("$pkg")
done <"$root/third_party/apt-packages.txt"

while ((${#queue[@]})); do
  pkg=${queue[0]}; queue=("${queue[@]:1}")
  [[ -n ${chosen[$pkg]:-} ]] && continue
  [[ -n $(field "$pkg" Package) ]] || { echo "fetch-debs: no package '$pkg' in the apt lists (run apt-get update?)" >&2; exit 1; }
  chosen[$pkg]=$(field "$pkg" Version)
  src=$(source_of "$pkg")
  # Depends lines look like "  Depends: libfoo1" or "  |Depends: <virtual>"; follow real packages of the same source.
  while read -r dep; do
    [[ $dep == \<* ]] && continue
    [[ $(source_of "$dep") == "$src" ]] && queue+=("$dep")
  done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
             "$pkg" | sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: //p')
done

mkdir -p "$dir"
cd "$dir"
mapfile -t pkgs < <(printf '%s\n' "${!chosen[@]}" | sort)
echo "fetch-debs: ${#pkgs[@]} packages: ${pkgs[*]}" >&2
apt-get download "${pkgs[@]}" 2>&1 | { grep -v -e 'Download is performed unsandboxed' -e '^Get:' || true; } >&2
for p in "${pkgs[@]}"; do echo "$p=${chosen[$p]}"; done >MANIFEST.txt
for p in "${pkgs[@]}"; do
  compgen -G "${p}_*.deb" >/dev/null || { echo "fetch-debs: $p was not downloaded" >&2; exit 1; }
done
debs=(./*.deb)
echo "fetch-debs: ${#debs[@]} .deb files in $(pwd)" >&2
