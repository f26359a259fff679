"""Which module, imported after torch, initialises CUDA (then a forked child cannot use it): import it, print the
seconds and torch.cuda.is_initialized(), then fork and try a CUDA tensor in the child.  `python cuda_init.py MODULE`"""
import importlib
import os
import sys
import time

import torch

t0 = time.perf_counter()
importlib.import_module(sys.argv[1])
took = time.perf_counter() - t0
pid = os.fork()
if pid == 0:
    try:
        torch.zeros(1, device="cuda")
        os._exit(0)
    except Exception:
        os._exit(1)
_, status = os.waitpid(pid, 0)
print(f"{sys.argv[1]}: {took:.2f} s, cuda initialised {torch.cuda.is_initialized()}, forked child "
      f"{'can' if os.waitstatus_to_exitcode(status) == 0 else 'cannot'} use CUDA")
