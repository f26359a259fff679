import os

import pytest
from hypothesis import settings

# CI: deterministic, no example database writes.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session")
def registry():
    from verify import checks
    from verify.registry import REGISTRY
    checks.load_all()
    return REGISTRY
