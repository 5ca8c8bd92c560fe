"""The compiled measures the rules read, each equal to the library or reference it mirrors, bit for
bit: spaCy's words (words, over wordtable's compiled table of spans; spacylib: spaCy without
torch), datatrove's text measures (textstats) and line measures (lines), fastText's language
identification (lid, over ftdict, fasttext and hsoftmax, its compiled parts), the n-gram hashes
of decontamination (ngrams), and what the numba code
shares (compiled). They know nothing of rules, settings or parts: a kernel takes text or arrays
and gives numbers. This file imports nothing.
"""
