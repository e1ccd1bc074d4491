#!/usr/bin/env bash
# check_runtime_stage.sh SOURCE_DIR: docker/runtime-stage.py, through which scripts/build-image.sh takes the user,
# volumes, environment and entry point from docker/Dockerfile's runtime stage, reads that stage completely (so a
# Dockerfile change the daemonless build cannot follow fails here, in the fast suite), substitutes ARGs and the base
# PATH as Docker does, and refuses what it cannot reproduce with exit code 2 and the line.
set -euo pipefail
src=${1:?usage: check_runtime_stage.sh SOURCE_DIR}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage() { python3 "$src/docker/runtime-stage.py" "$@"; }

stage "$src/docker/Dockerfile" --env PATH=/usr/bin:/bin >"$tmp/stage.json" ||
  fail "the Dockerfile's runtime stage was refused"
jq -e '.entrypoint == ["finetune"] and (.user | test("^[1-9][0-9]*:[1-9][0-9]*$"))
       and (.env | map(select(.[0] == "PATH"))[0][1] | startswith("/opt/finetune/bin:") and endswith(":/usr/bin:/bin"))
       and (.env | map(select(.[0] == "NCCL_NVLS_ENABLE"))[0][1] == "0")
       and .copy == [{"flags": ["--from=build"], "sources": ["/opt/finetune"], "dest": "/opt/finetune"}]
       and (.run | length) > 0 and (.run[0].env.UID | test("^[0-9]+$")) and .workdir == "/workspace"' \
  "$tmp/stage.json" >/dev/null || fail "unexpected runtime stage: $(cat "$tmp/stage.json")"

# Continuation lines, comments inside them, quoted values, both ENV forms and ${VAR}/$VAR from ARG and ENV.
cat >"$tmp/Dockerfile" <<'DOCKERFILE'
FROM base AS build
ENV NOT_THIS=1
FROM other AS runtime
ARG HOME_DIR=/home/u
ENV A="two words" \
# a comment inside the continuation
    B=${HOME_DIR}/x
ENV C $A and $B
USER 7:7
CMD ["--help"]
DOCKERFILE
stage "$tmp/Dockerfile" >"$tmp/small.json" || fail "the small Dockerfile was refused"
jq -e '.env == [["A", "two words"], ["B", "/home/u/x"], ["C", "two words and /home/u/x"]] and .user == "7:7"' \
  "$tmp/small.json" >/dev/null || fail "wrong substitution: $(cat "$tmp/small.json")"

# Instructions the daemonless build cannot reproduce: exit 2, naming the line.
refused() { # refused INSTRUCTION EXPECTED_MESSAGE
  printf 'FROM x AS runtime\nUSER 1:1\n%s\n' "$1" >"$tmp/Dockerfile"
  local rc=0
  stage "$tmp/Dockerfile" >/dev/null 2>"$tmp/err" || rc=$?
  [[ $rc == 2 ]] || fail "'$1' gave exit $rc, not 2"
  grep -q "line 3.*$2" "$tmp/err" || fail "'$1': the message does not name line 3 and '$2': $(cat "$tmp/err")"
}
refused 'HEALTHCHECK CMD true' 'not supported'
refused 'RUN ["true"]' 'shell form'
refused 'ENTRYPOINT finetune' 'exec form'
refused 'ENV A=${B:-x}' 'only ${NAME}'
printf 'FROM x AS build\n' >"$tmp/Dockerfile"
rc=0
stage "$tmp/Dockerfile" >/dev/null 2>"$tmp/err" || rc=$?
[[ $rc == 2 ]] && grep -q "no stage 'FROM ... AS runtime'" "$tmp/err" ||
  fail "a missing stage: exit $rc, $(cat "$tmp/err")"
echo "runtime stage: $(jq -c '{user, entrypoint, env: (.env | length), volumes}' "$tmp/stage.json"); refusals named"
