#!/usr/bin/env bash
# `make demo`: the whole pipeline on shipped data with the default (internal) back end.
# 1. describe a shipped network; 2. prove one property SAFE; 3. refute one, writing its
# counterexample record and image. Fails (non-zero) if a verdict is not the expected one.
set -uo pipefail
cd "$(dirname "$0")/.."
QV=${QV:-.venv/bin/qverify}
OUT=${OUT:-out/demo}
mkdir -p "$OUT"

echo "== 1. the network: qverify info benchmarks/vocalic/vocalic.onnx"
"$QV" info benchmarks/vocalic/vocalic.onnx || exit 2

expect() {  # expect CODE DESCRIPTION COMMAND...
    local code=$1 what=$2; shift 2
    echo; echo "== $what: $*"
    "$@"; local got=$?
    if [ "$got" -ne "$code" ]; then echo "demo: expected exit code $code, got $got" >&2; exit 1; fi
}
expect 0 "2. prove: A stays an A within +-5 pixel levels (<8,8>)" \
    "$QV" verify --spec benchmarks/demo/vowel-A-L10.toml --json "$OUT/vowel-A-L10.json"
expect 10 "3. refute: within +-60 levels an adversarial A exists (<8,8>)" \
    "$QV" verify --spec benchmarks/demo/vowel-A-L120.toml --json "$OUT/vowel-A-L120.json"
echo
echo "== records: $OUT/vowel-A-L10.json $OUT/vowel-A-L120.json (qverify show $OUT/vowel-A-L120.json)"
echo "== counterexample image: $OUT/vowel-A-L120.png"
echo "== qverify is $QV: \`. .venv/bin/activate\` puts it on your PATH, as the README's examples use it"
