#!/bin/bash
# H200 batch 1: verify all on cuda, ci and full, several workers; timings.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
python3 -c 'import torch, triton, fla; print(torch.__version__, triton.__version__, fla.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0))'
nproc
python3 -m verify --version
t0=$(date +%s)
timeout 280 python3 -m verify all --device cuda --profile ci --workers 8 --json $OUT/ci_w8.json > $OUT/ci_w8.log 2>&1; echo "ci w8 rc=$? wall=$(( $(date +%s)-t0 ))s"
t0=$(date +%s)
timeout 280 python3 -m verify all --device cuda --profile full --workers 12 --json $OUT/full_w12.json > $OUT/full_w12.log 2>&1; echo "full w12 rc=$? wall=$(( $(date +%s)-t0 ))s"
tail -40 $OUT/ci_w8.log; tail -40 $OUT/full_w12.log
