#!/usr/bin/env bash
# image_exec.sh [--volume HOST:PATH]... [--env NAME=VALUE]... [--user UID:GID] [--entrypoint PROG] ROOTFS CONFIG
#               [ARG...]
# Runs an unpacked image (`umoci unpack`) the way `docker run IMAGE ARG...` would, with no container engine: in
# private mount and PID namespaces, chrooted into ROOTFS, with /proc, a minimal /dev (null, zero, full, random,
# urandom, a tmpfs /dev/shm), /sys read-only and each HOST directory bind-mounted at PATH; as the image config's User,
# in its WorkingDir, with only its Env (plus HOME from the image's /etc/passwd when Env has none, as Docker sets it),
# running its Entrypoint followed by ARG... (its Cmd when no ARG is given). CONFIG is the image config JSON
# (`skopeo inspect --config`). The options act as `docker run`'s: --env adds or replaces a variable, --user replaces
# the User, --entrypoint the Entrypoint (and then the Cmd is not used). Nothing is mounted outside the namespaces,
# so removing ROOTFS afterwards is safe. Needs root; exits with the command's status.
set -euo pipefail
if [[ -z ${FT_IMAGE_EXEC_INSIDE:-} ]]; then
  FT_IMAGE_EXEC_INSIDE=1 exec unshare --mount --propagation private --pid --fork "$0" "$@"
fi
usage="usage: image_exec.sh [--volume HOST:PATH]... [--env NAME=VALUE]... [--user UID:GID] [--entrypoint PROG]"
usage+=" ROOTFS CONFIG [ARG...]"
volumes=()
extra_env=()
entrypoint=()
user=""
while (($#)); do
  case $1 in
    --volume) volumes+=("${2:?$usage}") && shift 2 ;;
    --env) extra_env+=("${2:?$usage}") && shift 2 ;;
    --user) user=${2:?$usage} && shift 2 ;;
    --entrypoint) entrypoint=("${2:?$usage}") && shift 2 ;;
    *) break ;;
  esac
done
rootfs=${1:?$usage}
config=${2:?$usage}
shift 2

mount -t proc proc "$rootfs/proc"
mount --bind -o ro /sys "$rootfs/sys"
mount -t tmpfs -o mode=755,nosuid tmpfs "$rootfs/dev"
for node in null zero full random urandom; do
  touch "$rootfs/dev/$node"
  mount --bind "/dev/$node" "$rootfs/dev/$node"
done
mkdir "$rootfs/dev/shm"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$rootfs/dev/shm"
ln -s /proc/self/fd "$rootfs/dev/fd"
for volume in "${volumes[@]}"; do
  mkdir -p "$rootfs/${volume#*:}"
  mount --bind "${volume%%:*}" "$rootfs/${volume#*:}"
done

# The process as the config describes it.
[[ -n $user ]] || user=$(jq -r '.config.User // ""' "$config")
[[ -n $user ]] || user=0:0
[[ $user == *:* ]] || user=$user:$(awk -F: -v u="$user" '$1 == u || $3 == u {print $4}' "$rootfs/etc/passwd")
uid=${user%%:*}
mapfile -t env < <(jq -r '.config.Env // [] | .[]' "$config")
env+=("${extra_env[@]}") # env(1) applies them in order: a later NAME=VALUE wins
if ! printf '%s\n' "${env[@]}" | grep -q '^HOME='; then
  home=$(awk -F: -v u="$uid" '$1 == u || $3 == u {print $6}' "$rootfs/etc/passwd")
  env+=("HOME=${home:-/}")
fi
workdir=$(jq -r '.config.WorkingDir // "/"' "$config")
if ((${#entrypoint[@]} == 0)); then
  mapfile -t entrypoint < <(jq -r '.config.Entrypoint // [] | .[]' "$config")
  if (($# == 0)); then
    mapfile -t cmd < <(jq -r '.config.Cmd // [] | .[]' "$config")
    set -- "${cmd[@]}"
  fi
fi
exec chroot --userspec="$user" "$rootfs" /usr/bin/env -i -C "${workdir:-/}" "${env[@]}" "${entrypoint[@]}" "$@"
