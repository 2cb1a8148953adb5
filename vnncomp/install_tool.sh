#!/usr/bin/env bash
# VNN-COMP: install_tool.sh v1
# Installs qverify as the README says: `make setup` in the repository root (a .venv with the Python
# packages of pyproject.toml; gcc through apt when run as root and missing). Idempotent: a set-up
# checkout is left as it is. Run once before prepare_instance.sh / run_instance.sh.
set -uo pipefail
ROOT=$(dirname "$(dirname "$(readlink -f "$0")")")
if [ "$#" -ne 1 ] || [ "$1" != "v1" ]; then
  echo "error: usage: $0 v1 (the interface version)" >&2
  exit 2
fi
command -v make >/dev/null 2>&1 || { echo "error: make is required (apt-get install make)" >&2; exit 2; }
make --no-print-directory -C "$ROOT" setup || { echo "error: make setup failed in $ROOT" >&2; exit 2; }
