"""Ground truth and the fast forms (docs/design.md section 2.1).

Oracles, written literally: the float64 (torch) and mpmath recurrences, walks and explicit Householder
products.  Fast forms, written once against an operations context (ops.py): path_forms.py and
mdn_forms.py, bound to float64 torch here, to a rounding matmul in verify/same_dtype.py, and to exact sympy
arithmetic in references/symbolic, whose proofs therefore prove the code that runs.

This package depends on nothing else in the project.
"""
