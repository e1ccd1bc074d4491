#!/usr/bin/env bash
# Installs what the build and tests need and is missing: Debian packages (third_party/apt-packages.txt, or the lists
# in FT_APT_LISTS) and a project-local virtual environment .venv with the pinned pip packages
# (third_party/requirements.txt; bitsandbytes and torchao from third_party/requirements-bnb.txt in .venv/bnb).
# Idempotent: returns in seconds when everything is present.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# FT_APT_LISTS: the package lists to install from (scripts/fuzz.sh adds third_party/apt-packages-fuzz.txt,
# scripts/build-image.sh installs third_party/apt-packages-image.txt).
read -r -a lists <<<"${FT_APT_LISTS:-third_party/apt-packages.txt}"
mapfile -t wanted < <(cat "${lists[@]}" | grep -v -e '^#' -e '^$')
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: note: the CUDA toolkit is at /usr/local/cuda but not on PATH; CMake will still find it."
fi

# Measured on a fresh install (2026-12-07): .venv ends at 5.5 GB, and pip holds the 2.8 GB of downloaded wheels in
# TMPDIR until it has installed them all. Refuses to start when the space is not there, rather than failing halfway.
# An existing .venv (changed requirements) already holds its packages: only the downloads need room then. A TMPDIR
# too small for the downloads (a RAM-backed /tmp) is swapped for .venv/.pip-tmp when the repository's file system
# has room for both: sets pip_tmp.
pip_tmp=""
check_venv_space() {
  local tmp=${TMPDIR:-/tmp} venv_mb=5600 wheels_mb=2900
  if [[ -x .venv/bin/python ]]; then venv_mb=0; fi
  local root_fs tmp_fs root_free tmp_free
  root_fs=$(df -P "$root" | awk 'NR==2 {print $6}')
  tmp_fs=$(df -P "$tmp" | awk 'NR==2 {print $6}')
  root_free=$(df -Pm "$root" | awk 'NR==2 {print $4}')
  tmp_free=$(df -Pm "$tmp" | awk 'NR==2 {print $4}')
  local short=""
  if [[ $root_fs != "$tmp_fs" ]] && ((tmp_free < wheels_mb && root_free >= venv_mb + wheels_mb)); then
    echo "setup: TMPDIR=$tmp has $tmp_free MB free, pip's downloads need $wheels_mb: they go to .venv/.pip-tmp"
    pip_tmp="$root/.venv/.pip-tmp"
  elif [[ $root_fs == "$tmp_fs" ]]; then
    ((root_free >= venv_mb + wheels_mb)) ||
      short="$((venv_mb + wheels_mb)) MB on $root_fs ($root and TMPDIR=$tmp), $root_free MB free"
  else
    ((root_free >= venv_mb)) || short="$venv_mb MB on $root_fs (for $root/.venv), $root_free MB free"
    ((tmp_free >= wheels_mb)) || short="${short:+$short; }$wheels_mb MB on $tmp_fs (TMPDIR=$tmp), $tmp_free MB free"
  fi
  if [[ -n $short ]]; then
    echo "setup: error: not enough disk space for .venv: it needs $short." >&2
    echo "setup: hint: free some space, or point TMPDIR at another filesystem for pip's downloads, and rerun." >&2
    exit 1
  fi
}

# Runs a command with TMPDIR set to pip_tmp when check_venv_space chose it (venv's ensurepip unpacks there too).
with_pip_tmp() {
  if [[ -n $pip_tmp ]]; then
    mkdir -p "$pip_tmp"
    TMPDIR=$pip_tmp "$@"
  else
    "$@"
  fi
}

python=${FT_PYTHON_BOOTSTRAP:-python3}
stamp=.venv/.requirements.sha256
want_hash=$(sha256sum third_party/requirements.txt | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]] || [[ ! -f $stamp ]] || [[ $(cat "$stamp") != "$want_hash" ]]; then
  echo "setup: creating .venv with third_party/requirements.txt (first time: about 5.5 GB, a few minutes)"
  check_venv_space
  [[ -x .venv/bin/python ]] || with_pip_tmp "$python" -m venv .venv
  # --no-cache-dir: pip's cache would keep a second copy of the 2.8 GB of wheels for good.
  with_pip_tmp .venv/bin/python -m pip install -q --no-cache-dir --upgrade pip
  with_pip_tmp .venv/bin/python -m pip install -q --no-cache-dir -r third_party/requirements.txt
  echo "$want_hash" >"$stamp"
fi

# The quantization references (bitsandbytes, torchao) go into .venv/bnb, not site-packages
# (third_party/requirements-bnb.txt says why): their own stamp, and
# a changed file replaces the folder (pip --target keeps packages already there).
bnb_stamp=.venv/.requirements-bnb.sha256
bnb_hash=$(sha256sum third_party/requirements-bnb.txt | cut -d' ' -f1)
if [[ ! -d .venv/bnb/bitsandbytes ]] || [[ ! -f $bnb_stamp ]] || [[ $(cat "$bnb_stamp") != "$bnb_hash" ]]; then
  echo "setup: installing third_party/requirements-bnb.txt into .venv/bnb"
  rm -rf .venv/bnb
  with_pip_tmp .venv/bin/python -m pip install -q --no-cache-dir --no-deps --target .venv/bnb \
    -r third_party/requirements-bnb.txt
  echo "$bnb_hash" >"$bnb_stamp"
fi
# A .venv made while requirements.txt still listed bitsandbytes has it in site-packages.
if compgen -G ".venv/lib/python3*/site-packages/bitsandbytes-*.dist-info" >/dev/null; then
  echo "setup: removing bitsandbytes from .venv's site-packages (it is in .venv/bnb)"
  .venv/bin/python -m pip uninstall -y -q bitsandbytes
fi
if [[ -n $pip_tmp ]]; then rm -rf "$pip_tmp"; fi
echo "setup: ok"
