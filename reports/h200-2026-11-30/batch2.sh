#!/bin/bash
# H200 batch 2: verify all (ci, workers auto) in the foreground; in the background: the H200 report at the
# full profile, the sanitizer on the PaTH bf16 backward fault, device_compare and the same-dtype errors on
# cuda, and the machine-dependence tests on this machine's CPU.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
V="python3 -m verify"
python3 -c 'import torch, triton, fla; print(torch.__version__, triton.__version__, fla.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0))'; nproc; which compute-sanitizer
mkdir -p $OUT/rep
( timeout 560 $V report --device cuda --profile full --workers 3 --out $OUT/rep/h200-full > $OUT/report.log 2>&1; echo "report rc=$?" >> $OUT/report.log ) &
( python3 -c "from verify.localize.example import save_label; save_label('kernel.fla.path_attn.bwd.bf16.beta_uniform', 'T=64 D=32 Dv=32 HQ=2 H=2 seed=0', '/tmp/path_bwd_d32.pt')" && timeout 400 $V localize --id kernel.fla.path_attn.bwd.bf16.beta_uniform --inputs /tmp/path_bwd_d32.pt --device cuda --sanitize --json $OUT/sanitize.json > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" >> $OUT/sanitize.log ) &
( python3 -m verify.device_compare --device cuda --out $OUT/device_compare_gpu.json > $OUT/small.log 2>&1; for a in "--device cpu --threads 1" "--device cpu --threads 16" "--device cuda"; do echo "== lowprec $a"; python3 -m verify.lowprec $a; done >> $OUT/small.log 2>&1 ) &
( CUDA_VISIBLE_DEVICES= timeout 540 python3 -m pytest -q -p no:cacheprovider property_tests/test_precision.py property_tests/test_xfails.py property_tests/test_kernels.py > $OUT/pytest_h200_cpu.log 2>&1; echo "pytest rc=$?" >> $OUT/pytest_h200_cpu.log ) &
t0=$(date +%s)
timeout 500 $V all --device cuda --profile ci --json $OUT/all_ci.json --junit $OUT/all_ci.xml > $OUT/all_ci.log 2>&1; echo "all ci rc=$? wall=$(( $(date +%s)-t0 ))s" | tee -a $OUT/all_ci.log
wait
tail -25 $OUT/all_ci.log; tail -3 $OUT/report.log $OUT/sanitize.log $OUT/pytest_h200_cpu.log; cat $OUT/small.log | tail -30
cd $OUT && tar czf rep.tgz rep && rm -rf rep
