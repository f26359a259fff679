#!/bin/bash
# The benchmark calls of 2026-12-03 (evening) on one H200, 16 workers, each right after the last on one machine:
#   G1 (fresh machine): the full profile with an empty Triton cache (/tmp/tcf), in a time box (no check started
#      after LIMIT s; SIGTERM at LIMIT + 130 s: the run writes what finished).
#   G2: the full profile again on G1's cache (warm); where `import fla.ops` spends its time (cProfile, CUDA
#      initialised first, as in a worker); ci with an empty cache (/tmp/tc).
#   G3: ci warm on G2's ci cache with 16 workers, then with --workers 1 (no check started after W1_LIMIT s).
# `bash run.sh G1 LIMIT`, `bash run.sh G2 LIMIT`, `bash run.sh G3 W1_LIMIT`.
set -u
PART=$1; LIMIT=${2:-300}
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
run() {   # name workers limit kill [extra verify args]: one run, its JSON, log and cache counts under $OUT
  local name=$1 workers=$2 limit=$3 kill=$4; shift 4
  echo "cache entries before: $(ls $TRITON_CACHE_DIR 2>/dev/null | wc -l)" > $OUT/$name.cache.txt
  { time timeout $kill python -m verify all --device cuda --workers $workers --time-limit $limit --json $OUT/$name.json "$@" ; } > $OUT/$name.log 2>&1
  echo "exit $?; cache entries after: $(ls $TRITON_CACHE_DIR | wc -l)" >> $OUT/$name.cache.txt
  gzip -f $OUT/$name.json
}
case $PART in
G1)
  nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
  export TRITON_CACHE_DIR=/tmp/tcf; rm -rf $TRITON_CACHE_DIR
  run full_cold 16 $LIMIT $((LIMIT + 130)) --profile full ;;
G2)
  export TRITON_CACHE_DIR=/tmp/tcf
  run full_warm 16 $LIMIT $((LIMIT + 80)) --profile full
  python - > $OUT/import_profile.log 2>&1 <<'PY'
import cProfile, pstats, time
t0 = time.perf_counter()
import torch
torch.zeros(1).cuda()
t1 = time.perf_counter()
cProfile.run("import fla.ops", "/tmp/fla.prof")
t2 = time.perf_counter()
print(f"import torch + cuda init {t1 - t0:.1f} s; import fla.ops {t2 - t1:.1f} s (under cProfile)")
pstats.Stats("/tmp/fla.prof").sort_stats("cumulative").print_stats(45)
pstats.Stats("/tmp/fla.prof").sort_stats("tottime").print_stats(25)
PY
  export TRITON_CACHE_DIR=/tmp/tc; rm -rf $TRITON_CACHE_DIR
  run ci_cold 16 170 240 ;;
G3)
  export TRITON_CACHE_DIR=/tmp/tc
  run ci_warm 16 100 140
  run ci_warm_w1 1 $LIMIT $((LIMIT + 60)) ;;
esac
cd $OUT && tar czf logs_$PART.tgz *.log *.cache.txt $(ls gpu.txt 2>/dev/null) && rm -f *.log *.cache.txt gpu.txt
