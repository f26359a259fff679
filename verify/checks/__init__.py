"""Check families.  Each module registers its checks at import; `load_all` imports every family."""
import importlib

FAMILY_MODULES = [
    "verify.checks.oracles_path",
    "verify.checks.oracles_mdn",
    "verify.checks.spectra",
    "verify.checks.symbolic",
    "verify.checks.kernels",
    "verify.checks.layers",
    "verify.checks.state_tracking",
    "verify.checks.interpreter",
    "verify.checks.configs",
    "verify.checks.tiles",
    "verify.checks.mutants",
]


def load_all() -> None:
    for name in FAMILY_MODULES:
        importlib.import_module(name)
