"""lid.py against fastText itself (fasttext-predict, the C++ the line used before): every label and
every float32 probability of predict(text, k=-1), bit for bit, on real text in many languages,
code, and text built to reach each branch of fastText's tokenizer (its whitespace, "</s>", labels
as words, NUL, invalid-looking bytes, words past the token cache)."""

import sysconfig
from pathlib import Path

import numpy as np
import pydoc_data.topics
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.core.errors import ShardlineError
from shardline.data.clean.rules import language
from shardline.data.clean.kernels import lid
from tests.unit.test_language import UDHR_1, humanize_messages

fasttext = pytest.importorskip("fasttext", reason="the reference is fasttext-predict: pip install -e '.[reference]'")


@pytest.fixture(scope="module")
def models():
    return lid.load(language.model_path()), fasttext.load_model(str(language.model_path()))


def same(models, text: str) -> None:
    """Ours from the text's bytes, and as the language rule asks (from its spans in the word table
    where they are fastText's tokens), equal fastText's on the text with newlines as spaces."""
    ours, theirs = models
    ref_labels, ref_probs = theirs.predict(text.replace("\n", " "), k=-1)
    ref = [(label.removeprefix("__label__"), float(p)) for label, p in zip(ref_labels, ref_probs)]
    labels, probs = ours.predict(text.replace("\n", " "))
    assert labels == list(ref_labels), text[:80]
    assert probs.tobytes() == np.asarray(ref_probs, np.float32).tobytes(), text[:80]
    for _ in range(2):  # the second time from the spans' rows kept in the table
        assert language.identify(text, None) == ref, text[:80]


def test_every_label_and_probability_is_fasttexts_on_real_text(models):
    texts = [t for _, t in sorted(pydoc_data.topics.topics.items())][:150]
    texts += [p.read_text(encoding="utf-8")[:30_000] for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]]
    texts += [*UDHR_1.values(), *(humanize_messages(lang) for lang in ("it_IT", "de_DE", "fr_FR", "ru_RU", "ja_JP"))]
    for text in texts:
        same(models, text)


@pytest.mark.parametrize("text", [
    "", " ", "\t\r\x0b\x0c", "a", "</s>", "hello </s> never read", "__label__en", "__label__zz unknown label",
    "x __label__ y", "\x00nul\x00 separated", "\u00a0non\u2003breaking\u3000spaces", "😀 emoji 🚀 text",
    "ж" * 300, "a" * 5000, "日本語のテキスト", "e\u0301 combining", "\x1c\x1d\x1e\x1f are not fastText's spaces",
    "lines\nand\n\nparagraphs\n", "tab\tand\u0085next line", "x </s>", "</s>",
])
def test_edge_cases_are_fasttexts(models, text):
    same(models, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=12), st.sampled_from(["</s>", "__label__en", " ", "\t", "\x00", "the",
                                                                 "\n", "\u00a0"])), max_size=40).map(" ".join))
def test_any_text_is_fasttexts(models, text):
    same(models, text)


def test_a_full_token_cache_is_emptied_and_answers_stay_fasttexts(models):
    ours, _ = models
    small = lid.Model(ours.labels, ours.inputs, ours.outputs)
    slots, keys, ids, state = small.cache
    object.__setattr__(small, "cache", (slots[:64].copy(), keys[:256].copy(), ids[:256].copy(), state.copy()))
    rng = np.random.default_rng(0)
    for _ in range(20):
        text = " ".join("".join(rng.choice(list("abcdefghij"), 6)) for _ in range(80))
        assert small.predict(text)[1].tobytes() == ours.predict(text)[1].tobytes()  # 80 new tokens: emptied


def test_a_file_that_is_not_such_a_model_is_refused_by_name(tmp_path):
    bad = tmp_path / "lid.bin"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(ShardlineError, match="lid.bin: not a fastText model"):
        lid.load(bad)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200).map(lambda t: t.replace("\n", " ")),
       st.lists(st.sampled_from(["en", "de", "fr", "ja", "zz", "sr", "hr"]), min_size=1, max_size=3))
def test_judge_is_the_whole_trees_first_and_its_best_wanted(models, text, langs):
    """What the language rule reads, from the part of the tree that can hold the top: the same
    label, probability and best wanted probability as the whole tree's answer."""
    ours, _ = models
    wanted = np.array([i for i, lb in enumerate(ours.labels) if lb[9:] in langs], np.int32)
    leaves, probs = ours.leaves(text)
    top, prob, best = ours.judge(text, wanted)
    assert (top, prob) == ((int(leaves[0]), float(probs[0])) if leaves.size else (-1, 0.0))
    assert best == max((float(p) for i, p in zip(leaves.tolist(), probs) if i in wanted.tolist()), default=0.0)


def test_a_tie_at_the_top_is_said_and_the_whole_tree_orders_it(models):
    from shardline.data.clean.kernels import hsoftmax as hs

    # two labels under one root whose sigmoid is 1/2 (zero weights): both leaves score log(1/2 + 1e-5)
    out_rows, zero = np.zeros((1, 16), np.float32), np.zeros(16, np.float32)
    left, right = np.array([-1, -1, 0], np.int32), np.array([-1, -1, 1], np.int32)
    parent, height = np.array([2, 2, -1], np.int32), np.array([0, 0, 1], np.int32)
    top, prob, tied, _ = hs.judge(zero, out_rows, left, right, parent, height, 2, np.zeros(0, np.int32))
    ids, probs = hs.tree(zero, out_rows, left, right, 2)
    assert tied and probs[0] == probs[1] == prob and top in ids.tolist()
    ours, _ = models
    assert ours._untie(top, prob, tied, 0.0, lambda: (ids, probs), None)[:2] == (int(ids[0]), float(probs[0]))
