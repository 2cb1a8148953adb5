# Shared by prepare_instance.sh and run_instance.sh (sourced, not run): find the project's venv
# relative to this folder and read the run's configuration.
VNNCOMP_DIR=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
QVERIFY_ROOT=$(dirname "$VNNCOMP_DIR")
QV="$QVERIFY_ROOT/.venv/bin/qverify"

# config.env sets defaults only: a variable already in the environment wins.
if [ -f "$VNNCOMP_DIR/config.env" ]; then
  # shellcheck source=/dev/null
  . "$VNNCOMP_DIR/config.env"
fi
: "${QVERIFY_SEMANTICS:=real}"
: "${QVERIFY_FORMAT:=16.16}"

qverify_missing() {
  [ -x "$QV" ] && return 1
  echo "error: $QV not found: run 'make setup' in $QVERIFY_ROOT first (it creates .venv)" >&2
  return 0
}
