#!/usr/bin/env bash
# VNN-COMP: run_instance.sh v1 CATEGORY ONNX_FILE VNNLIB_FILE RESULTS_FILE TIMEOUT
# Verifies one instance and writes RESULTS_FILE: sat (with the witness), unsat, timeout, unknown
# or error. What is verified (the real-valued network or a quantized implementation) comes from
# config.env or the environment: see README.md beside this script.
set -uo pipefail
# shellcheck source=common.sh
. "$(dirname "$(readlink -f "$0")")/common.sh"
if [ "$#" -ne 6 ]; then
  echo "error: usage: $0 v1 CATEGORY ONNX_FILE VNNLIB_FILE RESULTS_FILE TIMEOUT" >&2
  # the fifth argument is where the competition looks for the result: say error there when it is given
  if [ "$#" -ge 5 ] && [ -n "$5" ]; then printf 'error\n' > "$5" 2>/dev/null; fi
  exit 2
fi
if qverify_missing; then
  printf 'error\n' > "$5"
  exit 2
fi
exec "$QV" vnncomp run "$1" "$2" "$3" "$4" "$5" "$6" \
  --semantics "$QVERIFY_SEMANTICS" --format "$QVERIFY_FORMAT"
