"""What a run produced, judged and used: held-out judging of a checkpoint (judge), the report
stage's evidence card (report), export to transformers (export, card) and sampling (sample),
all over one loader of trained checkpoints (trained).
"""
