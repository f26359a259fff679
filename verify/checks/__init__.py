"""Check families.  Each module registers its checks at import; `load_all` imports every family."""


def load_all() -> None:
    from pathmdn_verify.checks import (  # noqa: F401  (imported for the checks they register)
        configs,
        interpreter,
        kernels,
        layers,
        mutants,
        oracles_mdn,
        oracles_path,
        spectra,
        state_tracking,
        symbolic,
        tiles,
    )
