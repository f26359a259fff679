#!/bin/bash
# `verify kernels --device cuda --profile full` on one H200 as parallel, time-boxed processes (the checks
# are Python-bound: hypothesis, float64 oracles, Triton compilation and autotuning), so that the 160
# checks fit in the device's 10-minute calls.  Each group writes $RES/<group>.json and $RES/<group>.log.
#   usage (repository root, fla importable):
#     RES=dir LIMIT=seconds ONLY='regex of group names' reports/h200-2026-11-29/run_kernels_full.sh
set -u
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
run() {
    local name=$1; shift
    [[ $name =~ ${ONLY:-.} ]] || return 0
    python3 -m verify kernels --device cuda --profile full --time-limit "${LIMIT:-400}" --json "$RES/$name.json" \
        "$@" > "$RES/$name.log" 2>&1 &
}
for pass in fwd bwd; do
    for dtype in bf16 fp32; do
        p="kernel.fla.path_attn.$pass.$dtype"
        run "path_${pass}_${dtype}_a" -k "$p.beta_*" -k "$p.w_*"
        run "path_${pass}_${dtype}_b" -k "$p.saturated" -k "$p.gate_*"
    done
    run "fox_$pass" -k "kernel.fla.forgetting_attn.$pass"
    run "mdn_recurrent_$pass" -k "kernel.fla.mdn_recurrent.$pass"
done
run path_other -k kernel.fla.path_attn.decode -k kernel.fla.path_attn.state -k "kernel.fla.*.convention.*"
for c in 16 32 64; do run "mdn_chunk$c" -k "kernel.fla.mdn_chunk$c"; done
wait
