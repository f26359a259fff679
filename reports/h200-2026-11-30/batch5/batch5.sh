#!/bin/bash
# H200 x2 batch 5:
#  C  both GPUs: verify all --device cuda --profile full --workers auto (16 workers), cold Triton cache: the full-profile wall time
#  A  GPU 1, alongside: the sanitizer on the PaTH bf16 backward fault (raw memcheck log, and verify localize --sanitize)
#  B  CPU cores 24-31, no GPU visible: the fixed bf16_lowering canary, the test files not reached in batch 4, verify mutants
#  D  after C, GPUs visible: the two-GPU runner test
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
V="python3 -m verify"; ID=kernel.fla.path_attn.bwd.bf16.beta_uniform
T0=$(date +%s); mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  python3 -c "from verify.localize.example import save_label; save_label('$ID', 'T=64 D=32 Dv=32 HQ=2 H=2 seed=0', '/tmp/x.pt')"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUDA_LAUNCH_BLOCKING=1 TRITON_CACHE_DIR=/tmp/tc_san timeout 240 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 20 python3 -m verify.sanitize $ID /tmp/x.pt cuda > $OUT/r/memcheck_raw.log 2>&1; echo "raw memcheck rc=$?" >> $OUT/r/memcheck_raw.log
  timeout 280 $V localize --id $ID --inputs /tmp/x.pt --device cuda --sanitize --json $OUT/r/localize_sanitize.json > $OUT/r/localize_sanitize.log 2>&1; echo "localize rc=$?" >> $OUT/r/localize_sanitize.log ) &
( export CUDA_VISIBLE_DEVICES=
  taskset -c 24-27 $V all --device cpu --id env.interpreter.bf16_lowering --json $OUT/r/lowering_cpu.json > $OUT/r/lowering_cpu.log 2>&1; echo "rc=$?" >> $OUT/r/lowering_cpu.log
  taskset -c 24-27 timeout $(( 560 - ($(date +%s)-T0) )) python3 -m pytest -q -p no:cacheprovider -rfE --durations=10 property_tests/test_fidelity.py -k "bf16_lowering or garbage or truncating" property_tests/test_kernels.py property_tests/test_runner.py property_tests/test_sanitize.py property_tests/test_precision.py property_tests/test_xfails.py property_tests/test_symbolic.py property_tests/test_mdn_oracles.py property_tests/test_path_oracles.py > $OUT/r/pytest_cpu.log 2>&1; echo "pytest rc=$?" >> $OUT/r/pytest_cpu.log ) &
( export CUDA_VISIBLE_DEVICES=; t=$(date +%s)
  taskset -c 28-31 timeout $(( 560 - ($(date +%s)-T0) )) $V mutants --device cpu --json $OUT/r/mutants_cpu.json > $OUT/r/mutants_cpu.log 2>&1; echo "mutants rc=$? wall=$(( $(date +%s)-t ))s" >> $OUT/r/mutants_cpu.log ) &
t=$(date +%s)
timeout 470 $V all --device cuda --profile full --workers auto --json $OUT/r/full_2gpu.json > $OUT/r/full_2gpu.log 2>&1; echo "C full 2 GPUs rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/full_2gpu.log
timeout $(( 575 - ($(date +%s)-T0) )) python3 -m pytest -q -p no:cacheprovider -rfEs property_tests/test_runner.py -k two_gpus > $OUT/r/two_gpus.log 2>&1; echo "D rc=$?" >> $OUT/r/two_gpus.log
wait
grep -E "^(FAIL|ERROR)|WORSE|total wall" $OUT/r/full_2gpu.log | head; tail -3 $OUT/r/two_gpus.log; tail -2 $OUT/r/lowering_cpu.log
grep -E "Invalid|at .*py:|rc=" $OUT/r/memcheck_raw.log | head -8; tail -6 $OUT/r/localize_sanitize.log | cut -c1-400
tail -5 $OUT/r/pytest_cpu.log; tail -3 $OUT/r/mutants_cpu.log
cd $OUT && tar czf r.tgz r && rm -rf r
