"""Check families.  Each module registers its checks at import; `load_all` imports every family."""
import importlib

FAMILY_MODULES = [
    "verify.checks.oracles_path",
]


def load_all() -> None:
    for name in FAMILY_MODULES:
        importlib.import_module(name)
