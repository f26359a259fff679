#!/bin/bash
# H200 batch 3: verify all (ci, workers auto) after the fault-detection fix; the H200 report at the full profile;
# the sanitizer on the PaTH bf16 backward fault.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
V="python3 -m verify"
mkdir -p $OUT/rep
( timeout 390 $V report --device cuda --profile full --workers 4 --out $OUT/rep/2026-11-30-cuda-full > $OUT/report.log 2>&1; echo "report rc=$?" >> $OUT/report.log ) &
( python3 -c "from verify.localize.example import save_label; save_label('kernel.fla.path_attn.bwd.bf16.beta_uniform', 'T=64 D=32 Dv=32 HQ=2 H=2 seed=0', '/tmp/path_bwd_d32.pt')" && timeout 330 $V localize --id kernel.fla.path_attn.bwd.bf16.beta_uniform --inputs /tmp/path_bwd_d32.pt --device cuda --sanitize --json $OUT/sanitize.json > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" >> $OUT/sanitize.log ) &
t0=$(date +%s)
timeout 395 $V all --device cuda --profile ci --json $OUT/all_ci.json --junit $OUT/all_ci.xml > $OUT/all_ci.log 2>&1; echo "all ci rc=$? wall=$(( $(date +%s)-t0 ))s" | tee -a $OUT/all_ci.log
wait
grep -E "^(FAIL|ERROR)|^│ total|WORSE|rc=" $OUT/all_ci.log | head -30; tail -4 $OUT/report.log; tail -12 $OUT/sanitize.log
cd $OUT && tar czf rep.tgz rep && rm -rf rep
