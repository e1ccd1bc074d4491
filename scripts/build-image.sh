#!/usr/bin/env bash
# build-image.sh [--build-dir DIR] [--tag TAG] [--no-archive] OUT: builds the finetune image without a container
# engine, from Debian packages and the README's build, into the directory OUT:
#   OUT/oci/           an OCI image layout (tag TAG), for skopeo, podman, umoci and registries
#   OUT/finetune.tar   the same image as a docker-archive named finetune:TAG: `docker load -i OUT/finetune.tar`
#                      (any Docker version) or `podman load -i OUT/finetune.tar`; --no-archive skips it
# Layers: a Debian 12 minbase root file system (mmdebstrap) with the user and the volume directories the runtime
# stage of docker/Dockerfile creates, then /opt/finetune from scripts/assemble-runtime.sh. The image config (user,
# environment, volumes, working directory, entry point) is the Dockerfile's runtime stage (docker/runtime-stage.py
# reads it), so the two ways to build cannot drift apart; the labels name the versions `finetune info` reports from
# the files that ship. DIR defaults to build/default, the README's build (run ./scripts/build.sh first); TAG to
# latest. Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the commit time of HEAD), so two builds of one
# commit give the same layer and manifest digests as long as the Debian archive serves the same packages.
# Needs root (mmdebstrap's root mode) and network access to deb.debian.org; installs the tools of
# third_party/apt-packages-image.txt through scripts/setup.sh when one is missing.
# Exit codes: 0 built, 2 usage or a missing prerequisite (not root, no build), otherwise the failed step's own
# (mmdebstrap, umoci, skopeo, ...), after its message.
set -euo pipefail
umask 022 # file modes in the layers must not depend on the caller's umask
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() {
  sed -n '2,/^set -e/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
  exit 2
}
die() {
  echo "build-image: $*" >&2
  exit 2
}
log() { echo "build-image: $*" >&2; }
build=$root/build/default
tag=latest
archive=1
while (($#)); do
  case $1 in
    --build-dir) build=${2:?--build-dir needs a directory} && shift 2 ;;
    --tag) tag=${2:?--tag needs a value} && shift 2 ;;
    --no-archive) archive=0 && shift ;;
    -h | --help) usage ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
(($# == 1)) || usage
out=$1
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--tag '$tag' is not a valid image tag"
[[ $(id -u) -eq 0 ]] || die "needs root: mmdebstrap builds the base in its root mode (try sudo)"
have_tools() {
  local t
  for t in mmdebstrap mmtarfilter umoci skopeo jq python3; do command -v "$t" >/dev/null || return 1; done
}
if ! have_tools; then
  FT_APT_LISTS=third_party/apt-packages-image.txt "$root/scripts/setup.sh" >&2
  have_tools || die "a tool of third_party/apt-packages-image.txt is still missing after scripts/setup.sh"
fi
[[ -x $build/bin/finetune ]] || die "no $build/bin/finetune; build it first (./scripts/build.sh)"

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null) || die "no git history: set SOURCE_DATE_EPOCH"
fi
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# The environment of the Debian base (Docker's default PATH), which the Dockerfile's ENV PATH=...:${PATH} extends.
base_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/.work
rm -rf "$work" "$out/oci" "$out/finetune.tar"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
python3 "$root/docker/runtime-stage.py" "$root/docker/Dockerfile" --env "PATH=$base_path" >"$work/stage.json"
dest=$(jq -r 'if (.copy | length) == 1 and .copy[0].flags == ["--from=build"] then .copy[0].dest
              else error("the runtime stage must have exactly one COPY --from=build") end' "$work/stage.json")

# The runtime file set, with every mtime set to SOURCE_DATE_EPOCH: umoci writes each file's mtime into the layer.
log "assembling $dest from $build"
"$root/scripts/assemble-runtime.sh" "$build" "$work/runtime" >&2
find "$work/runtime" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
# The versions of what ships, from the files themselves (not a second list).
env -i LD_LIBRARY_PATH="$work/runtime/lib" "$work/runtime/bin/finetune" info --json >"$work/info.json"
binary_git=$(jq -r .finetune.git "$work/info.json")
tree_git=$(git -C "$root" describe --always --dirty --tags 2>/dev/null || echo unknown)
[[ $binary_git == "$tree_git" ]] || log "warning: the binary reports $binary_git, the source tree is $tree_git;" \
  "the revision label is the binary's (./scripts/build.sh reconfigures and rebuilds it)"

base_layer() { # base_layer TAR: Debian 12 minbase plus the Dockerfile runtime stage's RUN instructions, in TAR
  # Each RUN runs in the chroot with the ARGs and ENVs it would see in `docker build`.
  jq -r '"#!/bin/sh", "set -e", (.run[] | "chroot \"$1\" /usr/bin/env -i "
         + ([.env | to_entries[] | "\(.key)=\(.value)" | @sh] | join(" ")) + " /bin/sh -ec " + (.command | @sh))' \
    "$work/stage.json" >"$work/customize.sh"
  chmod +x "$work/customize.sh"
  # Without man pages, documentation (copyright files kept) and translations, as Debian's -slim images; the
  # container engine provides /dev, /etc/hostname and /etc/resolv.conf.
  mmdebstrap --quiet --mode=root --variant=minbase --format=tar \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -f "$1/etc/hostname" "$1/etc/resolv.conf"' --customize-hook="$work/customize.sh" \
    bookworm - "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" |
    mmtarfilter --path-exclude='/dev/*' >"$1"
}
log "building the Debian 12 base with mmdebstrap (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, $created)"
base_layer "$work/base.tar"

# umoci writes the layout: every history entry and the config carry the same fixed time.
image=$out/oci:$tag
history=(--history.created "$created")
umoci init --layout "$out/oci"
umoci new --image "$image"
log "compressing the layers"
umoci raw add-layer --image "$image" "${history[@]}" \
  --history.created_by "mmdebstrap --variant=minbase bookworm; the RUN of docker/Dockerfile's runtime stage" \
  "$work/base.tar"
umoci insert --image "$image" "${history[@]}" --history.created_by "scripts/assemble-runtime.sh (COPY $dest)" \
  "$work/runtime" "$dest"
config=(--created "$created" "${history[@]}" --history.created_by "docker/Dockerfile's runtime stage config"
  --config.user "$(jq -r .user "$work/stage.json")" --config.workingdir "$(jq -r .workdir "$work/stage.json")")
while IFS= read -r -d '' arg; do config+=("$arg"); done < <(jq -j '
  (.env[] | "--config.env\u0000\(.[0])=\(.[1])\u0000"), (.volumes[] | "--config.volume\u0000\(.)\u0000"),
  (.entrypoint[] | "--config.entrypoint\u0000\(.)\u0000"), (.cmd[] | "--config.cmd\u0000\(.)\u0000"),
  (.labels | to_entries[] | "--config.label\u0000\(.key)=\(.value)\u0000")' "$work/stage.json")
while IFS= read -r -d '' label; do config+=(--config.label "$label"); done < <(jq -j --arg created "$created" '
  {"org.opencontainers.image.title": "finetune",
   "org.opencontainers.image.description": "Fine-tune LLaMA-family models with LibTorch (no Python at run time)",
   "org.opencontainers.image.version": .finetune.version, "org.opencontainers.image.revision": .finetune.git,
   "org.opencontainers.image.created": $created, "finetune.base": "debian bookworm minbase (mmdebstrap)",
   "finetune.libtorch.version": .libtorch, "finetune.cuda.version": .cuda_runtime,
   "finetune.cudnn.version": .cudnn, "finetune.nccl.version": .nccl}
  | to_entries[] | select(.value != null) | "\(.key)=\(.value)\u0000"' "$work/info.json")
umoci config --image "$image" "${config[@]}"
umoci gc --layout "$out/oci"

if ((archive)); then
  log "writing the docker-archive finetune:$tag"
  skopeo copy --quiet "oci:$image" "docker-archive:$out/finetune.tar:finetune:$tag"
fi
manifest=$(skopeo inspect --raw "oci:$image" | sha256sum | cut -d' ' -f1)
log "done: $out/oci (manifest sha256:$manifest)$( ((archive)) && echo ", $out/finetune.tar")"
skopeo inspect --raw "oci:$image" | jq -r '.layers[] | "build-image: layer \(.digest) \(.size) bytes"' >&2
