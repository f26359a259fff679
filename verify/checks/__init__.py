"""Check families.  Each module registers its checks at import; `load_all` imports every family."""
import importlib

FAMILY_MODULES = [
    "pathmdn_verify.checks.oracles_path",
    "pathmdn_verify.checks.oracles_mdn",
    "pathmdn_verify.checks.spectra",
    "pathmdn_verify.checks.symbolic",
    "pathmdn_verify.checks.kernels",
    "pathmdn_verify.checks.layers",
    "pathmdn_verify.checks.state_tracking",
    "pathmdn_verify.checks.interpreter",
    "pathmdn_verify.checks.configs",
    "pathmdn_verify.checks.tiles",
    "pathmdn_verify.checks.mutants",
]


def load_all() -> None:
    for name in FAMILY_MODULES:
        importlib.import_module(name)
