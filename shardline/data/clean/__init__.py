"""The clean stage and its rules: raw records in, clean parts, their held-out split and their
dropped samples out. Three rooms: `rules/` (what decides a document: each rule with its settings,
and the registry that orders them), `kernels/` (the compiled measures the rules read: words,
lines, n-grams, fastText's language identification) and `stage/` (the stage's machinery: the
plan of parts, phase 1 and phase 2, the clean section of params.yaml, what it writes and reads
back). `verdict.py`, beside them, is the contract a rule answers by (`Drop`, `RuleEntry`): what
plug-ins import. This file imports nothing: the params loader imports `stage.settings` when it
first reads a params file, and needs none of the rest.
"""
