"""Kernels under test: adapters that give each production kernel one canonical signature.

Depends on nothing else in the project; kernel packages (fla) are imported lazily, inside the adapters.
"""
