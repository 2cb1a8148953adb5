#!/usr/bin/env bash
# VNN-COMP: prepare_instance.sh v1 CATEGORY ONNX_FILE VNNLIB_FILE
# Checks that qverify is set up and that the network and property load and fit each other.
# qverify keeps no state between instances, so there is nothing else to prepare.
set -uo pipefail
# shellcheck source=common.sh
. "$(dirname "$(readlink -f "$0")")/common.sh"
if [ "$#" -ne 4 ]; then
  echo "error: usage: $0 v1 CATEGORY ONNX_FILE VNNLIB_FILE" >&2
  exit 2
fi
qverify_missing && exit 2
exec "$QV" vnncomp prepare "$1" "$2" "$3" "$4"
