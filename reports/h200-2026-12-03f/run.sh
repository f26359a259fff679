#!/bin/bash
# Device calls of 2026-12-03 (night) on one H200, 16 cores.  `bash run.sh PART [LIMIT]`.
#   P: where time goes (probe.py, five processes at once) and which preload module initialises CUDA (cuda_init.py).
#   O: the MDN oracle's time on the CPU and on CUDA, alone and 16 processes at once (bench_oracle.py).
#   F1: the full profile with an empty Triton cache (/tmp/tcf), longest first by 12-03e's full cold JSON.
#   F2: the full profile again on F1's cache (warm), longest first by F1's JSON.
#   C1: ci with an empty cache (/tmp/tc), then ci warm on that cache longest first by the cold JSON.
# Every run is time-boxed (no check started after LIMIT s; SIGTERM at LIMIT + margin: the run writes what finished).
set -u
PART=$1; LIMIT=${2:-300}
D=reports/h200-2026-12-03f
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
case $PART in
P)
  export TRITON_CACHE_DIR=/tmp/tcp OMP_NUM_THREADS=1
  nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
  for m in torch._dynamo torch._inductor.compile_fx torch._inductor.lowering transformers transformers.modeling_utils \
           transformers.generation.utils sklearn.metrics scipy.stats fla.utils; do
    timeout 120 python $D/cuda_init.py $m >> $OUT/cuda_init.log 2>&1 &
  done; wait
  G=layer.fla.path.base.bf16.generation; R=kernel.fla.mdn_recurrent.bwd.bf16.beta_near0
  A=kernel.fla.path_attn.fwd.bf16.gate_strong
  timeout 400 python $D/probe.py $G > $OUT/gen.log 2>&1 &
  timeout 400 python $D/probe.py $G --mallopt > $OUT/gen_mallopt.log 2>&1 &
  timeout 400 python $D/probe.py $R > $OUT/mdn.log 2>&1 &
  timeout 400 python $D/probe.py $R --mallopt > $OUT/mdn_mallopt.log 2>&1 &
  timeout 400 python $D/probe.py $A > $OUT/attn.log 2>&1 &
  wait ;;
O)  # the MDN oracle on the CPU and on CUDA: alone, then 16 processes at once
  export OMP_NUM_THREADS=1
  for dev in cpu cuda; do
    python $D/bench_oracle.py $dev > $OUT/oracle_${dev}_alone.log 2>&1
    for i in $(seq 16); do python $D/bench_oracle.py $dev > /tmp/bo_${dev}_$i.log 2>&1 & done; wait
    cat /tmp/bo_${dev}_*.log > $OUT/oracle_${dev}_16.log
  done
  # the PaTH/FoX same-dtype implementations on CUDA (their --references auto place): the new fixed-order
  git show d4f0217:verify/core/precision.py > $D/precision_d4f0217.py
  # product and solve against d4f0217's, bit for bit
  python $D/bits_same.py 300 mdn_chunk16,mdn_chunk32,mdn_chunk64,mdn_recurrent,gdn_chunk,gdn_recurrent cuda > $OUT/bits_cuda.log 2>&1 ;;
F1)
  export TRITON_CACHE_DIR=/tmp/tcf; rm -rf $TRITON_CACHE_DIR
  gunzip -c reports/h200-2026-12-03e/full_cold.json.gz > /tmp/prev_cold.json
  run full_cold 16 $LIMIT $((LIMIT + 70)) --profile full --durations /tmp/prev_cold.json ;;
F2)
  export TRITON_CACHE_DIR=/tmp/tcf
  run full_warm 16 $LIMIT $((LIMIT + 60)) --profile full --durations /tmp/full_cold.json ;;
C1)
  export TRITON_CACHE_DIR=/tmp/tc; rm -rf $TRITON_CACHE_DIR
  run ci_cold 16 $LIMIT $((LIMIT + 60))
  run ci_warm 16 $LIMIT $((LIMIT + 40)) --durations /tmp/ci_cold.json ;;
esac
cd $OUT && tar czf logs_$PART.tgz $(ls *.log *.cache.txt gpu.txt 2>/dev/null) && rm -f *.log *.cache.txt gpu.txt
