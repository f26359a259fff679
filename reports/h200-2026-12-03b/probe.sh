#!/bin/bash
# Probe call (one fresh H200): where a GPU run's first 20 s go, how far the full profile gets cold in a time box,
# and the MDN references on the CPU against the GPU at full.  `bash probe.sh LIMIT`
set -u
LIMIT=${1:-240}
T0=$(date +%s.%N)
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
stamp() { echo "$(python3 -c "import time; print(f'{time.time() - $T0:.1f}')") $*" >> $OUT/startup.txt; }
stamp installed
{ /usr/bin/time -f "%e s import torch + cuda init" python -c "import torch; torch.zeros(1).cuda()"; } 2>> $OUT/startup.txt
{ /usr/bin/time -f "%e s import fla (fla.ops)" python -c "import torch, fla.ops"; } 2>> $OUT/startup.txt
{ /usr/bin/time -f "%e s import verify checks" python -c "from verify.core.registry import load_checks; load_checks()"; } 2>> $OUT/startup.txt
export TRITON_CACHE_DIR=/tmp/tcp; rm -rf $TRITON_CACHE_DIR
for w in 1 16; do
  { /usr/bin/time -f "%e s verify all --id oracle.path.literal_vs_mpmath.uniform --workers $w" python -m verify all --id oracle.path.literal_vs_mpmath.uniform --device cuda --workers $w > $OUT/one_w$w.log 2>&1; } 2>> $OUT/startup.txt
done
stamp "startup probes done"
run() {   # name limit timeout [extra verify args]: SIGTERM at the timeout (the run writes what finished)
  local name=$1 limit=$2 kill=$3; shift 3
  { time timeout $kill python -m verify all --device cuda --workers 16 --time-limit $limit --json $OUT/$name.json "$@" ; } > $OUT/$name.log 2>&1
  stamp "$name done (exit $?)"
}
run full_cold $LIMIT $((LIMIT + 70)) --profile full
run refs_cpu 40 90 --profile full -k "kernel.fla.mdn_recurrent.bwd.fp32" --references cpu
run refs_dev 40 90 --profile full -k "kernel.fla.mdn_recurrent.bwd.fp32" --references device
cd $OUT && tar czf logs.tgz *.log startup.txt && rm -f *.log
