"""The shared core every layer stands on: params (config), where files live (layout), crash-safe
files (fsio), errors, kill points for crash tests (chaos) and how a stage spreads
its parts (parallel).
"""
