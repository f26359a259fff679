"""FoX (fla.ops.forgetting_attn / fla.ops.attn.parallel_attn) on the GPU at large |q|, |k|: where is the output
non-finite?  A grid of T, head dim, gain, dtype, with and without the forget gate; one JSON line per point."""
import json
import sys

import torch
from fla.ops.attn import parallel_attn
from fla.ops.forgetting_attn import parallel_forgetting_attn

out = []
for dtype in (torch.float32, torch.bfloat16):
    for T in (64, 128, 129, 160, 256, 1024):
        for D in (32, 64):
            for gain in (1e3, 1e4, 3e4, 1e5, 1e6):
                for gated in (True, False):
                    g = torch.Generator(device="cuda").manual_seed(0)
                    q = (gain * torch.randn(1, T, 1, D, generator=g, device="cuda")).to(dtype)
                    k = (gain * torch.randn(1, T, 1, D, generator=g, device="cuda")).to(dtype)
                    v = torch.randn(1, T, 1, D, generator=g, device="cuda").to(dtype)
                    if gated:
                        f = torch.nn.functional.logsigmoid(torch.randn(1, T, 1, generator=g, device="cuda")).float()
                        o = parallel_forgetting_attn(q, k, v, f)
                    else:
                        o = parallel_attn(q, k, v)
                    o = o[0] if isinstance(o, tuple) else o
                    bad = ~torch.isfinite(o.float())
                    rows = bad.any(-1).any(-1)[0]
                    out.append({"dtype": str(dtype)[6:], "T": T, "D": D, "gain": gain, "gated": gated,
                                "max_q": float(q.float().abs().max()), "nonfinite": int(bad.sum()),
                                "first_bad_row": int(rows.nonzero()[0]) if rows.any() else None,
                                "nan": int(torch.isnan(o.float()).sum())})
                    print(json.dumps(out[-1]), flush=True)
json.dump(out, open(sys.argv[1], "w"))
