#!/bin/bash
# One H200 call (device tool): `verify all --device cuda` at the ci profile twice on a fresh machine, first with
# an empty Triton cache (cold), then with the cache the first left (warm), compilations counted (JSON
# "compilations"); each run's JSON, log and cache counts under $OUT.  bash reports/h200-2026-12-01f/run.sh LIMIT_S
set -u
LIMIT=$1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
rm -rf /tmp/tc
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
for RUN in cold warm; do
  echo "cache entries before: $(ls /tmp/tc 2>/dev/null | wc -l)" > $OUT/ci_$RUN.cache.txt
  { time python -m verify all --device cuda --profile ci --time-limit $LIMIT --json $OUT/ci_$RUN.json ; } > $OUT/ci_$RUN.log 2>&1
  echo "exit $?; cache entries after: $(ls /tmp/tc | wc -l)" >> $OUT/ci_$RUN.cache.txt
done
