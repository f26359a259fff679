#!/bin/bash
# The second call: the same runs with the H200 entries listed (expected: exit 0 each); cold Triton cache.
set -u
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site TRITON_CACHE_DIR=/tmp/tc
mkdir -p $OUT/r2
for p in ci full; do
  python -m verify layers --device cuda --profile $p --json $OUT/r2/layers_$p.json > $OUT/r2/layers_$p.log 2>&1; echo "layers $p rc=$?"
done
python -m verify kernels --device cuda --profile ci --id kernel.fla.path_attn.bwd.fp32.saturated --id kernel.fla.path_attn.bwd.bf16.w_aligned --json $OUT/r2/path514.json > $OUT/r2/path514.log 2>&1; echo "path514 rc=$?"
tar czf $OUT/results2.tgz -C $OUT r2 && rm -rf $OUT/r2
