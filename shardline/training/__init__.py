"""The train stage: the model, the loop (train), checkpoints, resume, distributed training,
guards, seeded RNG state, the LR schedule, throughput monitoring, held-out evaluation, the run's identity and its
lineage.
"""
