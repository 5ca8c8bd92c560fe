"""The clean stage and its rules: raw records in, clean parts, their held-out split and their
dropped samples out. `stage.py` is the stage (`run`, and what the tokenize stage reads back);
`rules.py` is the rule registry, the rules' one order; each rule module (basic, language, gopher,
c4, fineweb, decontam, pii, urls) holds its rules, their settings and their registry entries; `settings.py`
assembles the `clean` section of params.yaml from them. Phase 2 is `select.py` (split.py,
minhash.py), the samples `dropped.py`, `shardline explain` is `explain.py`. This file imports
nothing: the config loader imports `settings` when it first reads a params file, and needs none of
the rest. Rules of other distributions come in through the "shardline.rules" entry points (rules.py).
"""
