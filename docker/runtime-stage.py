#!/usr/bin/env python3
"""runtime-stage.py DOCKERFILE [--stage NAME] [--env NAME=VALUE ...]: one stage of a Dockerfile as JSON.

scripts/build-image.sh builds the image without a daemon. It takes the runtime stage from docker/Dockerfile through
this script instead of keeping a second copy of the user, the volumes and the environment, so the two images cannot
drift apart. Printed: {"run": [{"command", "env"}], "copy": [{"flags", "sources", "dest"}], "env": [[NAME, VALUE]],
"labels", "volumes", "workdir", "user", "entrypoint", "cmd"}. ${VAR} and $VAR are substituted where Docker does
(ARG, ENV, COPY, LABEL, USER, VOLUME, WORKDIR) from the stage's ARGs, its ENVs so far and --env, which stands for
the environment of the base image (PATH). An instruction the daemonless build cannot reproduce (ADD, SHELL,
HEALTHCHECK, a RUN in exec form, ...) is an error naming its line: exit code 2.
"""
import argparse
import json
import re
import shlex
import sys


class DockerfileError(Exception):
    pass


def instructions(text):
    """(line number, keyword, arguments) of each instruction: comment lines dropped, continuation lines joined."""
    out, parts, start = [], [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("#"):
            continue
        if not parts:
            if not line.strip():
                continue
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            parts.append(stripped[:-1])
            continue
        parts.append(line)
        keyword, _, rest = " ".join(parts).strip().partition(" ")
        out.append((start, keyword.upper(), rest.strip()))
        parts = []
    if parts:
        raise DockerfileError(f"line {start}: the file ends inside a continued line")
    return out


VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(text, variables, where):
    def one(match):
        name = match.group(1) or match.group(3)
        if match.group(2):
            raise DockerfileError(f"{where}: ${{{name}{match.group(2)}}}: only ${{NAME}} and $NAME are supported")
        return variables.get(name, "")

    return VAR.sub(one, text)


def pairs(args, variables, where):
    """NAME=VALUE words (ENV, LABEL, ARG), quotes removed as Docker does, values substituted."""
    words = shlex.split(args)
    if len(words) >= 2 and "=" not in words[0]:  # the old `ENV NAME VALUE` form
        return [(words[0], substitute(" ".join(words[1:]), variables, where))]
    out = []
    for word in words:
        name, eq, value = word.partition("=")
        if not eq:
            raise DockerfileError(f"{where}: '{word}' is not NAME=VALUE")
        out.append((name, substitute(value, variables, where)))
    return out


def exec_form(args, where):
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DockerfileError(f"{where}: only the exec form [\"...\"] is supported, not '{args}'")
    return value


def stage(instrs, name, base_env):
    body, found = [], False
    for number, keyword, args in instrs:
        if keyword == "FROM":
            found = re.search(rf"\s+AS\s+{re.escape(name)}$", args, re.IGNORECASE) is not None
        elif found:
            body.append((number, keyword, args))
    if not found and not body:
        raise DockerfileError(f"no stage 'FROM ... AS {name}'")
    out = {"run": [], "copy": [], "env": [], "labels": {}, "volumes": [], "workdir": "/", "user": "",
           "entrypoint": [], "cmd": []}
    args_seen, env = {}, dict(base_env)
    for number, keyword, text in body:
        where = f"line {number} ({keyword})"
        variables = {**args_seen, **env}  # an ENV wins over an ARG of its name, as in Docker
        if keyword == "ARG":
            name_, eq, default = text.partition("=")
            args_seen[name_] = substitute(default, variables, where) if eq else ""
        elif keyword == "ENV":
            for key, value in pairs(text, variables, where):
                env[key] = value
                variables[key] = value
                out["env"] = [e for e in out["env"] if e[0] != key] + [[key, value]]
        elif keyword == "RUN":
            if text.startswith("["):
                raise DockerfileError(f"{where}: only the shell form of RUN is supported")
            out["run"].append({"command": text, "env": {**args_seen, **env}})
        elif keyword == "COPY":
            words = shlex.split(substitute(text, variables, where))
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            out["copy"].append({"flags": flags, "sources": paths[:-1], "dest": paths[-1]})
        elif keyword == "LABEL":
            out["labels"].update(pairs(text, variables, where))
        elif keyword == "VOLUME":
            text = substitute(text, variables, where)
            out["volumes"] += exec_form(text, where) if text.startswith("[") else text.split()
        elif keyword == "WORKDIR":
            out["workdir"] = substitute(text, variables, where)
        elif keyword == "USER":
            out["user"] = substitute(text, variables, where)
        elif keyword in ("ENTRYPOINT", "CMD"):
            out[keyword.lower()] = exec_form(text, where)
        else:
            raise DockerfileError(f"{where}: not supported by the daemonless build (scripts/build-image.sh)")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dockerfile")
    parser.add_argument("--stage", default="runtime")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE of the base image's environment")
    opts = parser.parse_args()
    base_env = dict(e.partition("=")[::2] for e in opts.env)
    try:
        with open(opts.dockerfile, encoding="utf-8") as f:
            result = stage(instructions(f.read()), opts.stage, base_env)
    except (OSError, DockerfileError, ValueError) as e:
        print(f"runtime-stage: {opts.dockerfile}: {e}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
