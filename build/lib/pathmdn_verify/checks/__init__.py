"""Check families.  Each module registers its checks at import; `load_all` imports every family."""


def load_all() -> None:
    from pathmdn_verify.checks import (  # noqa: F401  (imported for the checks they register)
        config_canaries,
        fidelity_canaries,
        kernel_checks,
        layer_checks,
        oracles_mdn,
        oracles_path,
        spectra,
        state_tracking,
        symbolic,
        tile_canaries,
    )
