#!/bin/bash
# H200 x2 batch 11, right after batch 10 on the same host (Triton cache /tmp/tc warm from batch 10): the full profile
# on both GPUs and 32 cores, --workers auto (16): the 2-GPU speed-up against batch 12
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
V="python3 -m verify"; mkdir -p $OUT/r
du -sh /tmp/tc; ls /tmp/tc | wc -l; git log --oneline | head -1
t=$(date +%s)
timeout -s TERM 575 $V all --device cuda --profile full --workers auto --json $OUT/r/full_warm_2gpu.json > $OUT/r/full_warm_2gpu.log 2>&1
echo "warm full 2 GPUs 32 cores rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_warm_2gpu.log
grep -E "^(FAIL|ERROR)|interrupted|total" $OUT/r/full_warm_2gpu.log | head
cd $OUT && tar czf r.tgz r && rm -rf r
