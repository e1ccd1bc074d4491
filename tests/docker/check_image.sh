#!/usr/bin/env bash
# check_image.sh SOURCE_DIR BUILD_DIR: the image of scripts/build-image.sh, run as a user runs it. Builds it from
# BUILD_DIR (or takes the OUT directory of an earlier build from FT_IMAGE_DIR), checks that the docker-archive holds
# the same image as the OCI layout, unpacks the layout with `umoci unpack`, and runs it with image_exec.sh (the image
# config's User, Env, WorkingDir, Entrypoint and Cmd; /runs a bind-mounted host directory):
#   - the bare image prints the help, and `--help` of every command and subcommand listed there exits 0;
#   - `finetune info` runs as a non-root user and reports the versions the labels name;
#   - the CPU demo `train --config /opt/finetune/configs/demo.yaml` writes its run through the working directory's
#     runs/ link into the mounted directory, owned by the image's user, and `generate` on that model reverses a list;
#   - ldd of every ELF file of the image resolves inside it, except the driver libraries of
#     docker/runtime-libs.txt (the NVIDIA Container Toolkit mounts those from the host);
#   - where podman is installed (third_party/apt-packages-image.txt), a container engine: `podman load` reads
#     finetune.tar as `docker load` would, and `podman run` runs `info` and `generate` on the demo's model, mounted
#     with -v, in a store of its own under the test's directory.
# Opt-in, as it builds and unpacks a multi-GB image (docs/docker.md gives the minutes): runs with FT_IMAGE_TEST=1 or
# FT_IMAGE_DIR set, and as root (chroot, mounts); otherwise exits 77 (skipped).
set -euo pipefail
src=${1:?usage: check_image.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_image.sh SOURCE_DIR BUILD_DIR}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [[ -z ${FT_IMAGE_DIR:-} && ${FT_IMAGE_TEST:-0} != 1 ]]; then
  echo "skipped: set FT_IMAGE_TEST=1 (builds the image) or FT_IMAGE_DIR=OUT of scripts/build-image.sh OUT"
  exit 77
fi
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root (umoci unpack, chroot, mounts)"; exit 77; }
# In a mount namespace of its own, so that nothing podman mounts outlives the test.
if [[ -z ${FT_CHECK_IMAGE_INSIDE:-} ]]; then
  FT_CHECK_IMAGE_INSIDE=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
tmp=$(mktemp -d "$build/image-test.XXXXXX") # on the build's disk: the image, its unpacked copy and podman's ~14 GB
runroot=$(mktemp -d /tmp/ft-podman.XXXXXX)    # podman's state: its path must be short (50 characters at most)
cleanup() {
  local m
  for m in $(findmnt -rn -o TARGET | grep -e "^$tmp/" -e "^$runroot/" | sort -r); do umount -l "$m"; done
  rm -rf "$tmp" "$runroot"
}
trap cleanup EXIT
SECONDS=0
timing=""
lap() { timing+="$1 ${SECONDS}s, " && SECONDS=0; }

image=${FT_IMAGE_DIR:-$tmp/image}
if [[ -z ${FT_IMAGE_DIR:-} ]]; then
  "$src/scripts/build-image.sh" --build-dir "$build" "$image" || fail "scripts/build-image.sh failed"
  lap build
fi
[[ -f $image/oci/index.json ]] || fail "no OCI layout in $image/oci (scripts/build-image.sh OUT writes OUT/oci)"
ref=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$image/oci/index.json")
config=$tmp/config.json
skopeo inspect --config "oci:$image/oci:$ref" >"$config"

# The docker-archive (what `docker load` reads) names finetune:TAG and holds the same config, so the same layers.
if [[ -f $image/finetune.tar ]]; then
  tar -xOf "$image/finetune.tar" manifest.json >"$tmp/archive.json"
  jq -e --arg t "finetune:$ref" '.[0].RepoTags | any(. == $t or . == "docker.io/library/" + $t)' "$tmp/archive.json" \
    >/dev/null || fail "the docker-archive is not tagged finetune:$ref: $(cat "$tmp/archive.json")"
  oci_config=$(skopeo inspect --raw "oci:$image/oci:$ref" | jq -r .config.digest)
  [[ $(jq -r '.[0].Config' "$tmp/archive.json") == "${oci_config#sha256:}.json" ]] ||
    fail "the docker-archive's config is not the OCI layout's $oci_config"
fi

umoci unpack --image "$image/oci:$ref" "$tmp/bundle" >/dev/null || fail "umoci unpack failed"
rootfs=$tmp/bundle/rootfs
lap unpack
image_exec=$src/tests/docker/image_exec.sh
mkdir "$tmp/runs"
# The image's OMP_NUM_THREADS=4 suits GPU ranks; on a host with fewer cores it oversubscribes the CPU demo, so the
# test passes -e OMP_NUM_THREADS=$(nproc) there, as docs/docker.md tells users to.
omp=()
(($(nproc) >= 4)) || omp=(--env "OMP_NUM_THREADS=$(nproc)")
# `docker run -v "$PWD/runs:/runs" IMAGE ARG...`, the host directory owned by a host user of the image's UID.
run_image() { "$image_exec" --volume "$tmp/runs:/runs" "${omp[@]}" "$rootfs" "$config" "$@"; }

check_user() {
  uid=$("$image_exec" --entrypoint /usr/bin/id "$rootfs" "$config" -u) || fail "id did not run in the image"
  ((uid != 0)) || fail "the image runs as root (User '$(jq -r .config.User "$config")')"
  chown "$uid:$("$image_exec" --entrypoint /usr/bin/id "$rootfs" "$config" -g)" "$tmp/runs"
}

# check_help [COMMAND...]: `finetune COMMAND... --help` exits 0; then the same for each subcommand it lists.
helps=0
check_help() {
  local out sub
  out=$(run_image "$@" --help 2>&1) || fail "finetune $* --help failed: $out"
  helps=$((helps + 1))
  for sub in $(awk '/^Subcommands:/ {on = 1; next} on && !NF {on = 0} on && /^  [a-z]/ {print $1}' <<<"$out"); do
    check_help "$@" "$sub"
  done
}

check_info() {
  local info want got
  info=$(run_image info 2>&1) || fail "finetune info failed: $info"
  want=$(jq -r '.config.Labels["finetune.libtorch.version"]' "$config")
  got=$(awk '$1 == "LibTorch" {print $2}' <<<"$info")
  [[ -n $got && $got == "$want" ]] || fail "info reports LibTorch '$got', the label says '$want': $info"
  want=$(jq -r '.config.Labels["org.opencontainers.image.version"]' "$config")
  got=$(awk '$1 == "finetune" {print $2}' <<<"$info")
  [[ $got == "$want" ]] || fail "info reports finetune '$got', the label says '$want'"
}

check_demo() {
  run_image train --config /opt/finetune/configs/demo.yaml >"$tmp/train.log" 2>&1 ||
    fail "the demo failed: $(tail -20 "$tmp/train.log")"
  local model=$tmp/runs/demo/model
  [[ -f $model/model.safetensors && -f $model/config.json ]] ||
    fail "the demo wrote no model to the mounted /runs (through /workspace/runs): $(ls -R "$tmp/runs" | head -20)"
  [[ $(stat -c %u "$model/model.safetensors") == "$uid" ]] || fail "the model is not owned by the image's user $uid"
  local out
  out=$(run_image generate --model runs/demo/model --prompt $'Reverse: 1 2 3 4 5\nAnswer:' --max-new-tokens 24 2>&1) ||
    fail "generate failed: $out"
  grep -q '5 4 3 2 1' <<<"$out" || fail "generate did not reverse 1 2 3 4 5: $out"
}

# unresolved FILE...: "FILE: LIBRARY" for each library the image's loader cannot find for FILE (ldd in the image,
# with the image's Env, as root so that every file is readable), except the driver's.
mapfile -t driver < <(sed -n -E 's/^driver[[:space:]]+//p' "$src/docker/runtime-libs.txt" | tr -s ' \t' '\n')
unresolved() {
  "$image_exec" --user 0:0 --entrypoint /bin/sh "$rootfs" "$config" \
    -c 'for f; do echo "== $f"; ldd "$f" 2>&1; done; true' sh "$@" |
    awk -v globs="${driver[*]}" '
      BEGIN { n = split(globs, g, " "); for (i = 1; i <= n; i++) { gsub(/\./, "\\.", g[i]); gsub(/\*/, ".*", g[i]) } }
      /^== / { file = $2; next }
      $2 == "=>" && $3 == "not" {
        for (i = 1; i <= n; i++) if ($1 ~ "^" g[i] "$") next
        print file ": " $1
      }'
}

check_ldd() {
  mapfile -t elfs < <(cd "$rootfs" && find . -type f -size +64c -print0 |
    xargs -0 python3 -c 'import sys; [print(f[1:]) for f in sys.argv[1:] if open(f, "rb").read(4) == b"\x7fELF"]')
  printf '%s\n' "${elfs[@]}" | grep -qx /opt/finetune/bin/finetune || fail "/opt/finetune/bin/finetune is no ELF file"
  local missing
  missing=$(unresolved "${elfs[@]}")
  [[ -z $missing ]] || fail "libraries missing from the image: $missing"
  # The check itself: with one library of /opt/finetune/lib hidden, the binary is reported.
  local lib
  lib=$(find "$rootfs/opt/finetune/lib" -name 'libyaml-cpp.so*' -print -quit)
  mv "$lib" "$lib.hidden"
  missing=$(unresolved /opt/finetune/bin/finetune)
  mv "$lib.hidden" "$lib"
  grep -q "^/opt/finetune/bin/finetune: $(basename "$lib")" <<<"$missing" ||
    fail "a hidden $(basename "$lib") was not reported: '$missing'"
}

# check_engine: podman loads finetune.tar and runs it. The flags suit the build host, whose root lacks
# CAP_SYS_RESOURCE and whose cgroups are hybrid: ulimits it may set, runc (crun refuses hybrid cgroups), cgroupfs.
engine="podman not installed: no engine check"
check_engine() {
  command -v podman >/dev/null && [[ -f $image/finetune.tar ]] || return 0
  local podman=(podman --root "$tmp/podman" --runroot "$runroot" --runtime runc --cgroup-manager cgroupfs)
  local run=(run --rm --network=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 -v "$tmp/runs:/runs")
  local out
  out=$("${podman[@]}" load -i "$image/finetune.tar" 2>&1) || fail "podman load failed: $out"
  grep -q "Loaded image.*finetune:$ref" <<<"$out" || fail "podman load named no finetune:$ref: $out"
  out=$("${podman[@]}" "${run[@]}" "finetune:$ref" info 2>&1) || fail "podman run ... info failed: $out"
  grep -q '^LibTorch' <<<"$out" || fail "podman run ... info printed no LibTorch line: $out"
  out=$("${podman[@]}" "${run[@]}" "finetune:$ref" generate --model runs/demo/model \
    --prompt $'Reverse: 1 2 3 4 5\nAnswer:' --max-new-tokens 24 2>&1) || fail "podman run ... generate failed: $out"
  grep -q '5 4 3 2 1' <<<"$out" || fail "generate under podman did not reverse 1 2 3 4 5: $out"
  engine="podman $(podman --version | awk '{print $3}'): load, info, generate"
}

check_user
out=$(run_image 2>&1) || fail "the bare image (Cmd $(jq -c .config.Cmd "$config")) failed: $out"
grep -q '^Subcommands:' <<<"$out" || fail "the bare image did not print the help: $out"
check_help
lap "help of $helps commands"
check_info
check_demo
lap "info, demo, generate"
check_ldd
lap "ldd of ${#elfs[@]} ELF files"
check_engine
lap "engine"
echo "image $(jq -r '.config.Labels["org.opencontainers.image.revision"]' "$config") (uid $uid): ${timing%, }; $engine"
