#!/usr/bin/env bash
# check_dockerfile.sh SOURCE_DIR: the Dockerfile builds with the README's scripts (setup.sh, build.sh) and copies exactly the directory
# scripts/assemble-runtime.sh writes, so the runtime file set has one source of truth (docker/runtime-libs.txt plus
# the binary's ldd closure) and no second list hides in the Dockerfile. Every ignored hadolint rule has a reason.
set -euo pipefail
src=${1:?usage: check_dockerfile.sh SOURCE_DIR}
df=$src/docker/Dockerfile
fail() { echo "FAIL: $*" >&2; exit 1; }

# Instructions only (comments dropped, continuation lines joined).
instructions=$(sed -e 's/^[[:space:]]*#.*$//' "$df" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' | grep -v '^[[:space:]]*$')

grep -Eq '^RUN .*scripts/setup\.sh' <<<"$instructions" || fail "the build stage does not run scripts/setup.sh"
grep -Eq '^RUN .*scripts/build\.sh release' <<<"$instructions" || fail "the build stage does not run scripts/build.sh release"
assemble=$(grep -E '^RUN .*scripts/assemble-runtime\.sh' <<<"$instructions") || fail "scripts/assemble-runtime.sh is not run"
[[ $(wc -l <<<"$assemble") -eq 1 ]] || fail "scripts/assemble-runtime.sh runs more than once"
out_dir=$(awk '{print $NF}' <<<"$assemble")

# The runtime stage copies from the build stage exactly once: the assembled directory, to the same place.
copies=$(grep -E '^COPY .*--from=' <<<"$instructions" || true)
[[ $(wc -l <<<"$copies") -eq 1 && -n $copies ]] || fail "expected exactly one COPY --from=build, found: ${copies:-none}"
read -r -a words <<<"$copies"
[[ ${words[-2]} == "$out_dir" && ${words[-1]} == "$out_dir" ]] ||
  fail "the COPY --from=build ($copies) is not the assembled directory $out_dir"

# No library list of its own: the Dockerfile names no shared object.
if grep -Eo '[A-Za-z0-9_+-]+\.so(\.[0-9]+)*' <<<"$instructions"; then fail "the Dockerfile names shared libraries itself"; fi
# The runtime stage installs nothing (no compiler, no packages), so its file set is the assembled one.
runtime=$(awk '/^FROM .* AS runtime/{on=1} on' <<<"$instructions")
[[ -n $runtime ]] || fail "no stage named runtime"
if grep -Eq 'apt-get|pip |install ' <<<"$runtime"; then fail "the runtime stage installs packages"; fi
grep -Eq '^USER ' <<<"$runtime" || fail "the runtime stage does not switch to a non-root user"
grep -Eq '^ENTRYPOINT \["finetune"\]' <<<"$runtime" || fail "ENTRYPOINT is not [\"finetune\"]"
if grep -Eq 'NCCL_NVLS_ENABLE=[^0]' <<<"$instructions"; then fail "NVLink multicast must stay off"; fi

# Base images are build args with exact tags (no 'latest', a full x.y.z CUDA version).
for arg in BUILD_IMAGE RUNTIME_IMAGE; do
  grep -Eq "^ARG $arg=nvidia/cuda:[0-9]+\.[0-9]+\.[0-9]+-[a-z-]*ubuntu24\.04$" <<<"$instructions" ||
    fail "ARG $arg is not an exact nvidia/cuda tag"
done

# Inline hadolint ignores must say why: "# hadolint ignore=DLxxxx <reason>".
while read -r line; do
  [[ $line =~ hadolint[[:space:]]+ignore=[A-Z0-9,]+[[:space:]]+[^[:space:]] ]] || fail "ignore without a reason: $line"
done < <(grep -E 'hadolint[[:space:]]+ignore' "$df" || true)
echo "Dockerfile: setup.sh, build.sh release, one COPY of $out_dir from assemble-runtime.sh, no library list"
