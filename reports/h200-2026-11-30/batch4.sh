#!/bin/bash
# H200 x2 batch 4 (correctness, three jobs at once on disjoint GPUs / cores):
#  J1 GPU 0: verify all --device cuda --profile ci --workers auto (one GPU: 8 workers), cold Triton cache
#  J2 GPU 1: the sanitizer on the PaTH bf16 backward fault, and verify report --device cuda --profile full
#  J3 8 CPU cores, no GPU visible: verify all --device cpu --profile ci, then the whole test suite (second machine)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
V="python3 -m verify"
nvidia-smi -L; nproc; lscpu | grep -E "Model name|^CPU\(s\)"
T0=$(date +%s); mkdir -p $OUT/rep
( export CUDA_VISIBLE_DEVICES=0; t=$(date +%s)
  timeout 540 $V all --device cuda --profile ci --workers auto --json $OUT/ci_gpu.json --junit $OUT/ci_gpu.xml > $OUT/ci_gpu.log 2>&1
  echo "J1 all ci cuda rc=$? wall=$(( $(date +%s)-t ))s" >> $OUT/ci_gpu.log ) &
( export CUDA_VISIBLE_DEVICES=1
  ( python3 -c "from verify.localize.example import save_label; save_label('kernel.fla.path_attn.bwd.bf16.beta_uniform', 'T=64 D=32 Dv=32 HQ=2 H=2 seed=0', '/tmp/x.pt')" && timeout 300 python3 -m verify.sanitize kernel.fla.path_attn.bwd.bf16.beta_uniform /tmp/x.pt cuda; echo "replay rc=$?"
    timeout 300 $V localize --id kernel.fla.path_attn.bwd.bf16.beta_uniform --inputs /tmp/x.pt --device cuda --sanitize --json $OUT/rep/localize_sanitize.json; echo "localize rc=$?" ) > $OUT/rep/sanitize.log 2>&1 &
  t=$(date +%s); timeout 545 $V report --device cuda --profile full --workers 4 --out $OUT/rep/h200-full > $OUT/rep/report.log 2>&1
  echo "J2 report full rc=$? wall=$(( $(date +%s)-t ))s" >> $OUT/rep/report.log; wait ) &
( export CUDA_VISIBLE_DEVICES=; t=$(date +%s)
  taskset -c 24-31 timeout 200 $V all --device cpu --profile ci --workers auto --json $OUT/rep/ci_cpu.json > $OUT/rep/ci_cpu.log 2>&1
  echo "J3a all ci cpu rc=$? wall=$(( $(date +%s)-t ))s" >> $OUT/rep/ci_cpu.log; t=$(date +%s)
  taskset -c 24-31 timeout $(( 560 - ($(date +%s)-T0) )) python3 -m pytest -q -p no:cacheprovider --durations=15 property_tests > $OUT/rep/pytest_cpu.log 2>&1
  echo "J3b pytest rc=$? wall=$(( $(date +%s)-t ))s" >> $OUT/rep/pytest_cpu.log ) &
wait
tail -3 $OUT/ci_gpu.log; grep -E "^(FAIL|ERROR)|WORSE" $OUT/ci_gpu.log | head; tail -3 $OUT/rep/report.log; tail -25 $OUT/rep/sanitize.log
tail -2 $OUT/rep/ci_cpu.log; tail -4 $OUT/rep/pytest_cpu.log
cd $OUT && tar czf rep.tgz rep && rm -rf rep
