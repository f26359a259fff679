#!/bin/bash
# H200 x2 batch 10 (2026-12-01): the full profile, cold Triton cache, both GPUs and 32 cores (auto: 16 workers),
# op-ordered start, signal fix in; the cache stays in /tmp/tc for batches 11 and 12 (warm runs on this host)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
V="python3 -m verify"; mkdir -p $OUT/r
nproc; nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline | head -1
t=$(date +%s)
timeout -s TERM 540 $V all --device cuda --profile full --workers auto --json $OUT/r/full_cold_2gpu.json > $OUT/r/full_cold_2gpu.log 2>&1
echo "cold full 2 GPUs rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_cold_2gpu.log
grep -E "^(FAIL|ERROR)|interrupted|total" $OUT/r/full_cold_2gpu.log | head; du -sh /tmp/tc; ls /tmp/tc | wc -l
cd $OUT && tar czf r.tgz r && rm -rf r
