#!/bin/bash
# H200 x2 batch 6:
#  B  CPU (no GPU visible), three pytest processes on disjoint 8-core sets: the test files batch 5 missed
#  S  GPU 0: one selection at ci, --workers auto then --workers 1, each with its own cold Triton cache
#  P  GPU 1: cProfile of single full-profile checks in-process (where the full profile's time goes)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo pip failed; exit 3; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
V="python3 -m verify"; T0=$(date +%s); mkdir -p $OUT/r; L=520
P="python3 -m pytest -q -p no:cacheprovider -rfE --durations=5"
( export CUDA_VISIBLE_DEVICES=; T=property_tests
  taskset -c 0-7 timeout $L $P $T/test_kernels.py $T/test_runner.py $T/test_sanitize.py $T/test_precision.py $T/test_xfails.py > $OUT/r/pytest1.log 2>&1; echo "rc=$?" >> $OUT/r/pytest1.log ) &
( export CUDA_VISIBLE_DEVICES=; T=property_tests
  taskset -c 8-15 timeout $L $P $T/test_localize.py $T/test_report.py $T/test_symbolic.py $T/test_mdn_oracles.py $T/test_path_oracles.py > $OUT/r/pytest2.log 2>&1; echo "rc=$?" >> $OUT/r/pytest2.log ) &
( export CUDA_VISIBLE_DEVICES=; T=property_tests
  taskset -c 16-23 timeout $L $P $T/test_fidelity.py::test_fla_bf16_garbage_without_dot_fix $T/test_fidelity.py::test_fla_bf16_truncating_casts_visible $T/test_mutants.py --deselect $T/test_mutants.py::test_every_mutant_is_killed > $OUT/r/pytest3.log 2>&1; echo "rc=$?" >> $OUT/r/pytest3.log ) &
( export CUDA_VISIBLE_DEVICES=1
  for id in kernel.fla.path_attn.fwd.fp32.beta_near2 kernel.fla.mdn_chunk64.fwd.bf16.typical; do
    timeout 250 python3 .device/prof_check.py $id full > $OUT/r/prof_$id.txt 2>&1; done ) &
SEL="mdn_chunk16 or mdn_recurrent or gdn_recurrent"
for w in auto 1; do t=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/tc_$w timeout $(( L - ($(date +%s)-T0) )) $V all --device cuda --profile ci -k "$SEL" --workers $w --json $OUT/r/sel_w$w.json > $OUT/r/sel_w$w.log 2>&1
  echo "S workers=$w rc=$? wall=$(( $(date +%s)-t ))s" | tee -a $OUT/r/sel_w$w.log; done
wait
for f in $OUT/r/pytest*.log; do tail -2 $f; done; head -3 $OUT/r/prof_*.txt | cut -c1-300
cd $OUT && tar czf r.tgz r && rm -rf r
