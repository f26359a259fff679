import sys

# `python -m pathmdn_verify` puts the current directory first on sys.path.  The package is already imported, so
# that entry is not needed, and in a checkout of this project it would make kernels/ (pathmdn_verify.kernels)
# shadow Hugging Face's `kernels`, which transformers imports: drop it, as `python -P` would.
if not sys.flags.safe_path and sys.path:
    sys.path.pop(0)

from pathmdn_verify.cli import main  # noqa: E402

if __name__ == "__main__":    # spawned workers import this module as __mp_main__: they must not run the CLI
    raise SystemExit(main())
