"""The data stages and what they are made of: download (http), clean (readers, rules, split),
tokenize (tokenizer) and shard. Each stage module has `run(params, layout, log, mapper)`.
"""
