#!/bin/bash
# H200: fla's PaTH backward dv with GQA and D != Dv past the 512-token super-block (found by the boundary cases
# on the CPU interpreter), on the GPU, with its controls (D == Dv; HQ == H; T < 512)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc DEV=cuda
for a in "600 32 16 strong 2" "1026 16 32 strong 2" "1026 32 16 none 2" "600 16 16 strong 2" "600 32 16 strong 1" "200 32 16 strong 2"; do
  echo "== T D Dv gate HQ = $a"
  python3 reports/h200-2026-12-01b/path_bwd_gqa_dv.py $a 2>&1 | grep -v -i warn
done
