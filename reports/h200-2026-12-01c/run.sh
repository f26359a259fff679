#!/bin/bash
# One H200 call (device tool): the layer family at ci and full, and the PaTH backward boundary checks at ci
# (T = 514: fla's dv offset); cold Triton cache at the start of the call.
set -u
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
mkdir -p $OUT/r
{ time python -m verify layers --device cuda --profile ci --json $OUT/r/layers_ci.json ; } > $OUT/r/layers_ci.log 2>&1
{ time python -m verify layers --device cuda --profile full --json $OUT/r/layers_full.json ; } > $OUT/r/layers_full.log 2>&1
{ time python -m verify kernels --device cuda --profile ci --id kernel.fla.path_attn.bwd.fp32.saturated --id kernel.fla.path_attn.bwd.bf16.w_aligned --json $OUT/r/path514.json ; } > $OUT/r/path514.log 2>&1
tar czf $OUT/results.tgz -C $OUT r && rm -rf $OUT/r
