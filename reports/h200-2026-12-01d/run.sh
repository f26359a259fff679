#!/bin/bash
# One H200 call (device tool) per run: `verify all --device cuda` at ci with Triton's compilations counted
# (JSON "compilations").  bash reports/h200-2026-12-01d/run.sh cold|warm LIMIT_S: cold empties the Triton
# cache first; warm reuses the one the previous call left (the same machine, called again within its idle time).
set -u
RUN=$1; LIMIT=$2
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
[ "$RUN" = cold ] && rm -rf /tmp/tc
echo "cache entries before: $(ls /tmp/tc 2>/dev/null | wc -l)" > $OUT/ci_$RUN.cache.txt
nvidia-smi --query-gpu=name,memory.total --format=csv >> $OUT/ci_$RUN.cache.txt 2>&1
{ time python -m verify all --device cuda --time-limit $LIMIT --json $OUT/ci_$RUN.json ; } > $OUT/ci_$RUN.log 2>&1
echo "cache entries after: $(ls /tmp/tc | wc -l)" >> $OUT/ci_$RUN.cache.txt
