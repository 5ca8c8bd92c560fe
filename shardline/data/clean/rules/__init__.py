"""The cleaning rules: what decides whether a document stays and what text it keeps. Each rule
module (basic, urls, language, gopher, c4, fineweb, decontam, pii) holds its rules, their settings
(a field of params.yaml's `clean` section each) and their `verdict.RuleEntry`s; `ruleset.py` is
what the quality rule sets share (several checks, one rule); `registry.py` orders every entry,
built in or a plug-in's, and runs a document through them (`apply`: the one decision). The
rules measure through `..kernels`; they never know how a part is read or written (`..stage`).
This file imports nothing.
"""
