#!/bin/bash
# One H200 call (device tool): `verify all --device cuda` at ci twice in a row in one call, cold (empty Triton
# cache) then warm (the cache the cold run left), after listed faults stopped being replayed under
# compute-sanitizer; results in $OUT/r2_*.
set -u
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
rm -rf /tmp/tc
for run in cold warm; do
  { time python -m verify all --device cuda --time-limit 240 --json $OUT/r2_ci_$run.json ; } > $OUT/r2_ci_$run.log 2>&1
  grep -E "Triton compilations|total wall time|^real" $OUT/r2_ci_$run.log
done
