#!/bin/bash
# One H200 call (device tool) on a fresh machine: `verify all --device cuda --profile full` with an empty Triton
# cache (cold), no check started after LIMIT_S.  bash reports/h200-2026-12-01f/full.sh LIMIT_S
set -u
LIMIT=$1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
rm -rf /tmp/tc
{ time python -m verify all --device cuda --profile full --time-limit $LIMIT --json $OUT/full_cold.json ; } > $OUT/full_cold.log 2>&1
echo "exit $?; cache entries after: $(ls /tmp/tc | wc -l)" > $OUT/full_cold.cache.txt
