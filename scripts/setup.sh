#!/usr/bin/env bash
# Set up qverify on a fresh Debian/Ubuntu machine: system tools (when root with apt), a virtual
# environment in .venv, and the Python packages of pyproject.toml (with the test extra).
# Idempotent: re-running only installs what is missing. Used by `make setup` (and so by `make demo`,
# `make test` and .ci/run). Frama-C (290 MB; only `--intervals framac` uses it, never the default)
# is an explicit extra: FRAMAC=1 (`make setup-framac`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
FRAMAC=${FRAMAC:-}

need_apt=()
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
if [ -n "$FRAMAC" ]; then command -v frama-c >/dev/null 2>&1 || need_apt+=(frama-c-base); fi
"$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# onnxruntime's x86 kernels without AVX-VNNI (what --format int8-x86 verifies) run here only under
# qemu's Haswell model when this CPU has VNNI: Debian's qemu-user (~100 MB) for those tests
if [ "$(uname -m)" = x86_64 ] && grep -qE 'avx512_vnni|avx_vnni' /proc/cpuinfo 2>/dev/null; then
  command -v qemu-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-user)
fi
if ((${#need_apt[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: apt-get install ${need_apt[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${need_apt[@]}" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need_apt[@]}" >/dev/null; } ||
      echo "setup: warning: could not install ${need_apt[*]} with apt-get" >&2
  else
    echo "setup: note: not installed: ${need_apt[*]} (run as root on Debian/Ubuntu to install them)" >&2
  fi
fi
command -v gcc >/dev/null 2>&1 || { echo "setup: error: gcc is required (apt-get install gcc)" >&2; exit 2; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $("$PYTHON" --version)" >&2
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -c 'import sys; assert sys.version_info >= (3, 11), "qverify needs Python >= 3.11"'
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "setup: pip install -e .[dev] (into $VENV)" >&2
"$VENV/bin/python" -m pip install -q -e ".[dev]"
echo "setup: done ($("$VENV/bin/qverify" --version); frama-c: $(command -v frama-c || echo 'not installed: optional, make setup-framac'))" >&2
