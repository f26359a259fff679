#!/bin/bash
# Which earlier check makes kernel.fla.gdn_chunk.bwd.bf16.gate_near0 fault under --workers 1 (ci_warm_w1: an illegal
# memory access, where 16 workers and a rerun alone reach fla's refusal of the GDN chunk backward).  In the
# one-worker process it ran after a worker replacement, then forgetting_attn.bwd.bf16.magnitude and four MDN bf16
# backward checks.  One fresh machine, one worker each: FoX's check then GDN's; the MDN checks then GDN's; and
# FoX's example rerun alone under compute-sanitizer (verify localize --sanitize).
set -u
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tcg
one() { local name=$1 limit=$2; shift 2
  { time timeout $limit python -m verify all --device cuda --workers 1 --json $OUT/$name.json "$@" ; } > $OUT/$name.log 2>&1
  echo "$name exit $?" >> $OUT/steps.txt; }
one fox_then_gdn 110 -k "forgetting_attn.bwd.bf16.magnitude or gdn_chunk.bwd.bf16.gate_near0"
one mdn_then_gdn 80 -k "mdn_chunk16.bwd.bf16.logmu_floor or mdn_chunk32.bwd.bf16.logmu_floor or mdn_chunk64.bwd.bf16.logmu_floor or mdn_recurrent.bwd.bf16.logmu_floor or gdn_chunk.bwd.bf16.gate_near0"
{ time timeout 120 python -m verify localize --sanitize --device cuda --id kernel.fla.forgetting_attn.bwd.bf16.magnitude ; } > $OUT/fox_sanitize.log 2>&1
echo "fox_sanitize exit $?" >> $OUT/steps.txt
cd $OUT && tar czf gdn_w1_logs.tgz *.log steps.txt && rm -f *.log steps.txt
