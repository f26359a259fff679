#!/bin/bash
# One H200 call: the same MDN / GDN checks at full with the references (float64 oracle, same-dtype
# implementation) on the GPU, then on the CPU (--references device | cpu); compare details.seconds_in.
set -u
SEL='kernel.fla.mdn_chunk16.bwd or kernel.fla.mdn_recurrent.bwd or kernel.fla.gdn_recurrent.fwd'
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
for where in device cpu; do
  { time python -m verify all --device cuda --profile full -k "$SEL" --references $where --json $OUT/refs_$where.json ; } > $OUT/refs_$where.log 2>&1
done
