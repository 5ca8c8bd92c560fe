"""The clean stage's machinery: `run.py` is the stage (`run`: plan, phase 1 per part, phase 2,
stats.json and split.json); `settings.py` assembles params.yaml's `clean` section from the rule
registry; `inputs.py` resolves the files rules read (by content); phase 2 is `select.py` (the
held-out `split.py`, near dedup's `minhash.py`); `dropped.py` writes every drop and the samples,
`damage.py` the damaged raw files read past, `summary.py` reads stats.json back, `parts.py` reads
a finished part back (what tokenize, views and provenance read), and `explain.py` is `shardline
explain`. This file imports nothing, so reading a part back loads no rule.
"""
