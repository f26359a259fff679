#!/bin/bash
# The benchmark calls of 2026-12-03 (afternoon) on one H200, 16 workers; `bash run.sh F1` on a fresh machine,
# `bash run.sh F2` on the same machine right after (it reads the Triton cache F1 left in /tmp/tc).
# F1: ci with an empty Triton cache, ci again on that cache (warm), the full profile with another empty cache in a
#     time box (no check started after LIMIT s; SIGTERM at LIMIT + 90 s: the run writes what finished).
# F2: ci warm with --workers 1, for the statuses of a one-worker run (no check started after W1_LIMIT s).
set -u
PART=$1; LIMIT=${2:-200}; W1_LIMIT=${3:-300}
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
run() {   # name workers limit kill [extra verify args]: one run, its JSON, log and cache counts under $OUT
  local name=$1 workers=$2 limit=$3 kill=$4; shift 4
  echo "cache entries before: $(ls $TRITON_CACHE_DIR 2>/dev/null | wc -l)" > $OUT/$name.cache.txt
  { time timeout $kill python -m verify all --device cuda --workers $workers --time-limit $limit --json $OUT/$name.json "$@" ; } > $OUT/$name.log 2>&1
  echo "exit $?; cache entries after: $(ls $TRITON_CACHE_DIR | wc -l)" >> $OUT/$name.cache.txt
}
if [ "$PART" = F1 ]; then
  nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
  export TRITON_CACHE_DIR=/tmp/tc; rm -rf $TRITON_CACHE_DIR
  run ci_cold 16 170 260
  run ci_warm 16 100 160
  export TRITON_CACHE_DIR=/tmp/tcf; rm -rf $TRITON_CACHE_DIR
  run full_cold 16 $LIMIT $((LIMIT + 90)) --profile full
else
  export TRITON_CACHE_DIR=/tmp/tc
  run ci_warm_w1 1 $W1_LIMIT $((W1_LIMIT + 80))
fi
cd $OUT && tar czf logs_$PART.tgz *.log *.cache.txt $(ls gpu.txt 2>/dev/null) && rm -f *.log *.cache.txt gpu.txt
