"""Running a selection of checks: workers (runner.py), the terminal, the expected-failure list, the sanitizer."""
from __future__ import annotations

import importlib
import os

# Comma-separated modules that register extra checks when imported (tests plant checks that crash, hang or raise a
# fatal CUDA error this way): every process that runs checks, the reporting one and each worker, imports them.
EXTRA_CHECKS_ENV = "VERIFY_EXTRA_CHECKS"


def load_checks() -> None:
    """Register every check family, then the modules named by $VERIFY_EXTRA_CHECKS."""
    from pathmdn_verify import checks
    checks.load_all()
    for name in filter(None, os.environ.get(EXTRA_CHECKS_ENV, "").split(",")):
        importlib.import_module(name)
