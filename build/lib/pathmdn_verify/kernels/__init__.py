"""Kernels under test: adapters that give each production kernel one canonical signature.

Installed as pathmdn_verify.kernels; kernel packages (fla) are imported lazily, inside the adapters.
"""
if __name__ == "kernels":
    # this folder found as a top-level package: Python put a checkout's top on sys.path (python -c, or -m of
    # another module, run there), where it stands in for Hugging Face's `kernels`, which transformers imports
    raise ImportError("kernels/ of a pathmdn-verify checkout was imported as the top-level package `kernels` (it is "
                      "pathmdn_verify.kernels): Python put the checkout's top first on sys.path; run Python from "
                      "another directory, or with -P (PYTHONSAFEPATH=1)")
