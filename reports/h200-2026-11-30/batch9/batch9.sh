#!/bin/bash
# H200 x2 batch 9, right after batch 8 on the same host (Triton cache /tmp/tc warm from it):
#  W1  the full profile on GPU 0 and 16 cores (one H200's share: the single-GPU machine has 16 cores), --workers auto
#  W2  the same on both GPUs and 32 cores: the 2-GPU speed-up, warm cache both times
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
V="python3 -m verify"; mkdir -p $OUT/r; T0=$(date +%s)
du -sh /tmp/tc; ls /tmp/tc | wc -l
t=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout -s TERM 330 taskset -c 0-15 $V all --device cuda --profile full --workers auto --json $OUT/r/full_warm_1gpu.json > $OUT/r/full_warm_1gpu.log 2>&1
echo "W1 warm full 1 GPU 16 cores rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_warm_1gpu.log
t=$(date +%s)
timeout -s TERM $(( 560 - ($(date +%s)-T0) )) $V all --device cuda --profile full --workers auto --json $OUT/r/full_warm_2gpu.json > $OUT/r/full_warm_2gpu.log 2>&1
echo "W2 warm full 2 GPUs 32 cores rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_warm_2gpu.log
for f in $OUT/r/*.log; do grep -E "^(FAIL|ERROR)|interrupted after" $f | head -5; done
cd $OUT && tar czf r.tgz r && rm -rf r
