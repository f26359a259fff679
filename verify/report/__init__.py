"""`verify report`: error-bound reports (Markdown + PNG plots + strict JSON) and report diffs.

sweeps: which points a profile measures (the one op table); measure: one point, kernel vs float64 oracle vs
the same-dtype implementation, through the checks' own functions; bounds: the a-priori bounds; plots; document:
report.md and report.json; diff: `--compare OLD NEW`; cli: the subcommand.
"""
