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

python=${FT_PYTHON_BOOTSTRAP:-python3}
stamp=.venv/.requirements.sha256
want_hash=$(sha256sum third_party/requirements.txt | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]] || [[ ! -f $stamp ]] || [[ $(cat "$stamp") != "$want_hash" ]]; then
  echo "setup: creating .venv with third_party/requirements.txt (first time: a few GB, a few minutes)"
  [[ -x .venv/bin/python ]] || "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r third_party/requirements.txt
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
  .venv/bin/python -m pip install -q --no-deps --target .venv/bnb -r third_party/requirements-bnb.txt
  echo "$bnb_hash" >"$bnb_stamp"
fi
# A .venv made while requirements.txt still listed bitsandbytes has it in site-packages.
if compgen -G ".venv/lib/python3*/site-packages/bitsandbytes-*.dist-info" >/dev/null; then
  echo "setup: removing bitsandbytes from .venv's site-packages (it is in .venv/bnb)"
  .venv/bin/python -m pip uninstall -y -q bitsandbytes
fi
echo "setup: ok"
