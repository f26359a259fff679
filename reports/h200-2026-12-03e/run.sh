#!/bin/bash
# The benchmark calls of 2026-12-03 (late) on one H200, 16 workers, each right after the last on one machine:
#   B1 (fresh machine): where the MDN/GDN references are faster under load (bench_refs.py: 16 processes at once,
#      the same-dtype implementation on the CPU, then on CUDA; the oracle on the CPU in both), their same-dtype
#      bits on the CPU and CUDA, and how long importing fla takes alone and 16 at once (the workers' start).
#   F1: the full profile with an empty Triton cache (/tmp/tcf), longest first by the night's full cold JSON.
#   F2: the full profile again on F1's cache (warm), longest first by F1's JSON.
#   C1: ci with an empty cache (/tmp/tc), then ci warm on that cache longest first by the cold JSON.
#   W1: ci on C1's cache with one worker (the statuses must equal C1's).
# Every run is time-boxed (no check started after LIMIT s; SIGTERM at LIMIT + margin: the run writes what finished).
# `bash run.sh PART [LIMIT]`.
set -u
PART=$1; LIMIT=${2:-300}
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
python -m compileall -q -j 16 /tmp/site verify references kernels > /dev/null
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
run() {   # name workers limit kill [extra verify args]: one run, its JSON, log and cache counts under $OUT
  local name=$1 workers=$2 limit=$3 kill=$4; shift 4
  echo "cache entries before: $(ls $TRITON_CACHE_DIR 2>/dev/null | wc -l)" > $OUT/$name.cache.txt
  { time timeout $kill python -m verify all --device cuda --workers $workers --time-limit $limit --json /tmp/$name.json "$@" ; } > $OUT/$name.log 2>&1
  echo "exit $?; cache entries after: $(ls $TRITON_CACHE_DIR | wc -l)" >> $OUT/$name.cache.txt
  gzip -c /tmp/$name.json > $OUT/$name.json.gz
}
B=reports/h200-2026-12-03e/bench_refs.py
case $PART in
B1)
  nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
  { time python $B --bits ; } > $OUT/bits.log 2>&1
  for dev in cpu cuda; do
    for i in $(seq 16); do python $B $dev $i > /tmp/bench_${dev}_$i.json 2>/dev/null & done; wait
    cat /tmp/bench_${dev}_*.json > $OUT/bench_$dev.jsonl
  done
  { time python -c "import torch, fla" ; } > $OUT/import.log 2>&1
  { time (for i in $(seq 16); do python -c "import torch, fla" 2>/dev/null & done; wait) ; } >> $OUT/import.log 2>&1
  { time python -c "import torch; torch.zeros(1, device='cuda')" ; } >> $OUT/import.log 2>&1 ;;
I)  # why importing fla takes 19 s: the import profile, and whether the system packages have byte code
  export TRITON_CACHE_DIR=/tmp/tci
  python -X importtime -c "import torch, fla" 2> $OUT/importtime.log
  python -c "import sys, torch, transformers, os; print(sys.flags.dont_write_bytecode, sys.pycache_prefix, torch.__file__, transformers.__file__, os.access(os.path.dirname(transformers.__file__), os.W_OK))" > $OUT/pyc.log 2>&1
  ls $(python -c "import transformers, os; print(os.path.dirname(transformers.__file__))")/__pycache__ 2>&1 | head -3 >> $OUT/pyc.log
  { time python -c "import torch, fla" ; } >> $OUT/pyc.log 2>&1 ;;
F1)
  export TRITON_CACHE_DIR=/tmp/tcf; rm -rf $TRITON_CACHE_DIR
  gunzip -c reports/h200-2026-12-03d/full_cold.json.gz > /tmp/night_cold.json
  run full_cold 16 $LIMIT $((LIMIT + 70)) --profile full --durations /tmp/night_cold.json ;;
F2)
  export TRITON_CACHE_DIR=/tmp/tcf
  run full_warm 16 $LIMIT $((LIMIT + 60)) --profile full --durations /tmp/full_cold.json ;;
C1)
  export TRITON_CACHE_DIR=/tmp/tc; rm -rf $TRITON_CACHE_DIR
  run ci_cold 16 $LIMIT $((LIMIT + 60))
  run ci_warm 16 $LIMIT $((LIMIT + 40)) --durations /tmp/ci_cold.json ;;
W1)
  export TRITON_CACHE_DIR=/tmp/tc
  run ci_w1 1 $LIMIT $((LIMIT + 30)) ;;
esac
cd $OUT && tar czf logs_$PART.tgz $(ls *.log *.cache.txt *.jsonl gpu.txt 2>/dev/null) && rm -f *.log *.cache.txt *.jsonl gpu.txt
