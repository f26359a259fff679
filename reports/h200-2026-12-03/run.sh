#!/bin/bash
# H200 calls (device tool) of 2026-12-03, each on the machine the call gets; `bash run.sh A` or `bash run.sh B`.
# A (a fresh machine): `verify all --device cuda` at ci cold with the default workers (8) and with 16, each with an
#   empty Triton cache, then ci warm with 16 (the cache the second left); the FoX magnitude grid.
# B: the layer generation checks at full (2048 generated tokens); --configs autotune twice on one cache (the second
#   must time nothing); the full profile cold (empty cache) with 16 workers, no check started after LIMIT s.
set -u
PART=$1; LIMIT=${2:-300}
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
run() {   # name workers limit [extra verify args]: one verify all run, its JSON, log and cache counts under $OUT
  local name=$1 workers=$2 limit=$3; shift 3
  echo "cache entries before: $(ls $TRITON_CACHE_DIR 2>/dev/null | wc -l)" > $OUT/$name.cache.txt
  { time python -m verify all --device cuda --workers $workers --time-limit $limit --json $OUT/$name.json "$@" ; } > $OUT/$name.log 2>&1
  echo "exit $?; cache entries after: $(ls $TRITON_CACHE_DIR | wc -l)" >> $OUT/$name.cache.txt
}
if [ "$PART" = A ]; then
  export TRITON_CACHE_DIR=/tmp/tc8; rm -rf $TRITON_CACHE_DIR
  run ci_cold_w8 auto 170
  export TRITON_CACHE_DIR=/tmp/tc16; rm -rf $TRITON_CACHE_DIR
  run ci_cold_w16 16 170
  run ci_warm_w16 16 120
  timeout 60 python reports/h200-2026-12-03/fox_magnitude.py $OUT/fox_magnitude.json > $OUT/fox_magnitude.log 2>&1
else
  export TRITON_CACHE_DIR=/tmp/tcl; rm -rf $TRITON_CACHE_DIR
  run layers_full_generation 16 100 --profile full -k "layer and generation"
  export TRITON_CACHE_DIR=/tmp/tcat; rm -rf $TRITON_CACHE_DIR     # --configs autotune twice: the second times nothing
  for n in 1 2; do run autotune_$n 16 40 --configs autotune -k "gdn_chunk.fwd.fp32"; done
  export TRITON_CACHE_DIR=/tmp/tcf; rm -rf $TRITON_CACHE_DIR
  run full_cold_w16 16 $LIMIT --profile full
fi
cd $OUT && tar czf logs.tgz *.log *.cache.txt gpu.txt && rm -f *.log *.cache.txt gpu.txt
