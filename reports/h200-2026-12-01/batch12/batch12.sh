#!/bin/bash
# H200 x2 batch 12, right after batch 11 on the same host (Triton cache /tmp/tc warm from batches 10-11: warmer than for batch 11, so the 2-GPU ratio is if anything understated): the full profile
# on GPU 0 and cores 0-15 (the one-H200 machine has 16 cores), --workers auto (8)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
V="python3 -m verify"; mkdir -p $OUT/r
du -sh /tmp/tc; ls /tmp/tc | wc -l; git log --oneline | head -1
t=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout -s TERM 575 taskset -c 0-15 $V all --device cuda --profile full --workers auto --json $OUT/r/full_warm_1gpu.json > $OUT/r/full_warm_1gpu.log 2>&1
echo "warm full 1 GPU 16 cores rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_warm_1gpu.log
grep -E "^(FAIL|ERROR)|interrupted|total" $OUT/r/full_warm_1gpu.log | head
cd $OUT && tar czf r.tgz r && rm -rf r
