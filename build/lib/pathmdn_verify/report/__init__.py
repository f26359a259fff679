"""`verify report`: error-bound reports (Markdown + PNG plots + strict JSON) and report diffs.

sweeps: what a report measures (the records of pathmdn_verify.ops.OPS whose `report` family is set, and the float32
reference forms) and which points a profile sweeps; measure: one point, kernel vs float64 oracle vs the
same-dtype implementation, through the checks' own functions; bounds: the a-priori bounds; plots; document:
report.md and report.json; diff: `--compare OLD NEW`.  The subcommand is verify/commands/report.py.
"""
