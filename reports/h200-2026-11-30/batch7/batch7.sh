#!/bin/bash
# H200 x1 batch 7: the full profile alone on one H200 (16 cores), --workers auto, cold Triton cache, with the
# per-check time split (details.seconds_in: kernel incl. compilation, oracle, same-dtype, compile, compilations)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
V="python3 -m verify"; mkdir -p $OUT/r
nproc; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t=$(date +%s)
TRITON_CACHE_DIR=/tmp/tc_full timeout 570 $V all --device cuda --profile full --workers auto --time-limit 480 --json $OUT/r/full_w8.json > $OUT/r/full_w8.log 2>&1
echo "full rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_w8.log
tail -4 $OUT/r/full_w8.log
cd $OUT && tar czf r.tgz r && rm -rf r
