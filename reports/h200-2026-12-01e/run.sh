#!/bin/bash
# One H200 call (device tool) per run: `verify all --device cuda --profile PROFILE` with Triton's compilations
# counted (JSON "compilations").  bash reports/h200-2026-12-01e/run.sh cold|warm PROFILE LIMIT_S: cold empties the
# Triton cache first (and runs on a machine fresh from the device tool); warm reuses the cache the previous call
# left (the same machine, called again within its idle time).  LIMIT_S: --time-limit (no check starts after it).
set -u
RUN=$1; PROFILE=$2; LIMIT=$3
NAME=${PROFILE}_$RUN
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
[ "$RUN" = cold ] && rm -rf /tmp/tc
echo "cache entries before: $(ls /tmp/tc 2>/dev/null | wc -l)" > $OUT/$NAME.cache.txt
nvidia-smi --query-gpu=name,memory.total --format=csv >> $OUT/$NAME.cache.txt 2>&1
{ time python -m verify all --device cuda --profile $PROFILE --time-limit $LIMIT --json $OUT/$NAME.json ; } > $OUT/$NAME.log 2>&1
echo "cache entries after: $(ls /tmp/tc | wc -l)" >> $OUT/$NAME.cache.txt
