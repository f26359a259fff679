"""fla's own GDN chunk kernel registered as a second implementation, "fla_gdn", to run beside the built-in one:

    verify kernels --impl fla --impl docs/examples/fla_gdn_impl.py -k gdn_chunk

A Triton kernel is imported inside the function: on a CPU the toolkit installs Triton's interpreter, made faithful
to an H200, before any kernel is defined."""
import pathmdn_verify as pv


def gdn_chunk(q, k, v, g, beta, S0=None, output_final_state=None, cu_seqlens=None, scale=None):
    """output_final_state: None returns S_T (the canonical default), False returns (o, None)."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=S0,
                                  output_final_state=output_final_state is not False,
                                  cu_seqlens=None if cu_seqlens is None else cu_seqlens.long(),
                                  use_qk_l2norm_in_kernel=False)


pv.implement("gdn_chunk", gdn_chunk, name="fla_gdn", fp32_dot="tf32")
