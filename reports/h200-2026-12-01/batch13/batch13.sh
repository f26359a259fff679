#!/bin/bash
# H200 x2 batch 13, right after batch 12 on the same host (Triton cache /tmp/tc from the full-profile runs 10-12):
# the ci profile on GPU 0 and cores 0-15, --workers auto (8), with the op-ordered start; time-boxed to the session's device time left
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
V="python3 -m verify"; mkdir -p $OUT/r
t=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout -s TERM 300 taskset -c 0-15 $V all --device cuda --profile ci --workers auto --json $OUT/r/ci_1gpu.json > $OUT/r/ci_1gpu.log 2>&1
echo "ci 1 GPU 16 cores rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/ci_1gpu.log
grep -E "^(FAIL|ERROR)|interrupted|total" $OUT/r/ci_1gpu.log | head
cd $OUT && tar czf r.tgz r && rm -rf r
