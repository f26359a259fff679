"""A plug-in op whose kernel kills its own process at T = 64 (SIGSEGV, as a crashing kernel does), else the toy
op of plugins/toy_op.py: a report's point of it at T = 64 loses its worker.  The workers import this module
through $VERIFY_EXTRA_CHECKS (cli/test_report_crash.py sets it)."""
import dataclasses
import os
import signal

import toy_op

from pathmdn_verify.checks.kernel_checks import declare

NAME = "toy_crash_at_64"


def kernel(q, k, v, s, cu_seqlens=None, scale=None):
    if q.shape[1] == 64:
        os.kill(os.getpid(), signal.SIGSEGV)
    return toy_op.kernel(q, k, v, s, cu_seqlens=cu_seqlens, scale=scale)


CRASH = declare(dataclasses.replace(toy_op.TOY, name=NAME, kernel=kernel, mutants=()))
