#!/usr/bin/env bash
# check_image_reproducible.sh SOURCE_DIR BUILD_DIR: scripts/build-image.sh run twice on the same build and commit
# gives the same image, byte for byte: the same manifest digest, so the same config and the same layer digests
# (the Debian base and /opt/finetune). A difference names the part that differs.
# Opt-in like check_image.sh (two builds of a multi-GB layer): runs with FT_IMAGE_TEST=1 as root, else exits 77.
set -euo pipefail
src=${1:?usage: check_image_reproducible.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_image_reproducible.sh SOURCE_DIR BUILD_DIR}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [[ ${FT_IMAGE_TEST:-0} != 1 ]]; then
  echo "skipped: set FT_IMAGE_TEST=1 (builds the image twice)"
  exit 77
fi
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root (scripts/build-image.sh)"; exit 77; }
tmp=$(mktemp -d "$build/image-repro.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

SECONDS=0
for n in 1 2; do
  "$src/scripts/build-image.sh" --build-dir "$build" --no-archive "$tmp/$n" 2>"$tmp/log$n" ||
    fail "build $n failed: $(tail -20 "$tmp/log$n")"
  skopeo inspect --raw "oci:$tmp/$n/oci:latest" >"$tmp/manifest$n.json"
done
parts() { jq -r '"config \(.config.digest)", (.layers | to_entries[] | "layer \(.key) \(.value.digest)")' "$1"; }
if ! cmp -s "$tmp/manifest1.json" "$tmp/manifest2.json"; then
  fail "two builds differ: $(diff <(parts "$tmp/manifest1.json") <(parts "$tmp/manifest2.json") | tr '\n' ' ')"
fi
echo "two builds in ${SECONDS}s, the same manifest sha256:$(sha256sum <"$tmp/manifest1.json" | cut -d' ' -f1):"
parts "$tmp/manifest1.json"
