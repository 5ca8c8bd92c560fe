"""shardline.data.tokenizer: deterministic training, storage, and tiktoken == HF ids on real text.

Real text is /work/shared/corpora when present (or $SHARDLINE_CORPORA), else Python's own
stdlib sources, so these tests never need anything outside the interpreter.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tiktoken
import tokenizers
from tokenizers import models, normalizers, pre_tokenizers

from shardline.core import fsio
from shardline.data import bytebpe, tokenizer as T
from shardline.core.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
CORPORA = Path(os.environ.get("SHARDLINE_CORPORA") or REPO.parent / "shared" / "corpora")
PROSE_FILES = ("tinyshakespeare.txt", "wikitext2-valid.txt", "wikitext2-test.txt")
HAVE_CORPORA = all((CORPORA / f).is_file() for f in PROSE_FILES)
SPECIALS = ["<|endoftext|>", "<pad>"]


@functools.lru_cache(maxsize=None)
def stdlib_sources() -> tuple[str, ...]:
    """Every stdlib .py file (not site-packages) that decodes as UTF-8, in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        try:
            out.append(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue  # a few test files are deliberately in other encodings
    return tuple(out)


def take(texts, max_chars: int) -> list[str]:
    out, n = [], 0
    for t in texts:
        if n >= max_chars:
            break
        out.append(t)
        n += len(t)
    return out


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n[ \t]*\n", text) if p.strip()]  # wikitext: " \n" blanks


def unicode_sweep() -> list[str]:
    """Every 5th code point (surrogates excluded), mixed with spaces, digits, apostrophes."""
    cps = [c for c in range(0x20, 0x110000, 5) if not 0xD800 <= c < 0xE000]
    rng = random.Random(7)
    docs = []
    for i in range(0, len(cps), 400):
        parts = [chr(c) + rng.choice(["", " ", "  ", "1", "'s", "\u00a0", "\u3000", "\n", "e\u0301"])
                 for c in cps[i:i + 400]]
        docs.append("".join(parts))
    return docs


def edge_docs() -> list[str]:
    ws = [" ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\u2028", "\x0b", "\x0c", "\x85"]
    rng = random.Random(3)
    docs = ["", " ", "x" * 20000, " " * 5000 + "x", "x" + " " * 5000, "\n" * 3000,
            "\t \t" * 700 + "end", "  \n  \n   x   \n", "0123456789" * 500, "3.14159 2,718 1e-9 0x1F",
            "١٢٣ ٤٥٦ 一二三 ⅠⅡⅢ ½ ²³", "don't we'll you're it's I'M 'S 'sTART", "🙂🙃" * 100 + " 👨‍👩‍👧",
            "Ελληνικά русский 日本語 한국어 עברית العربية हिन्दी ไทย", "é" * 3000 + "e\u0301" * 3000]
    docs += ["".join(rng.choice(ws + ["a", "1", ".", "'t"]) for _ in range(rng.randint(1, 400)))
             for _ in range(300)]
    return docs


@pytest.fixture(scope="module")
def real():
    """(tokenizer trained on ~1.5 MB real text, {category: eval docs})."""
    code = stdlib_sources()
    code_train, code_eval = code[1::4], code[::8]  # disjoint files: eval is unseen code
    if HAVE_CORPORA:
        prose = {f: paragraphs((CORPORA / f).read_text(encoding="utf-8")) for f in PROSE_FILES}
        train = (take(prose["tinyshakespeare.txt"], 500_000) + take(prose["wikitext2-valid.txt"], 600_000)
                 + take(code_train, 400_000))
        evals = {f: take(ps, 900_000) for f, ps in prose.items()}
    else:
        train, evals = take(code_train, 1_500_000), {}
    code_files = take(code_eval, 900_000)
    evals["stdlib files"] = code_files
    evals["stdlib blocks"] = [b for f in code_files[:60] for b in paragraphs(f)]
    evals["non-ascii stdlib"] = [t for t in code if sum(ord(c) > 127 for c in t) >= 20]
    evals["unicode sweep"] = unicode_sweep()
    evals["edge cases"] = edge_docs()
    return T.train_bpe(train, vocab_size=4096, special_tokens=SPECIALS), evals


@pytest.fixture(scope="module")
def small():
    text = (CORPORA / PROSE_FILES[0]).read_text() if HAVE_CORPORA else "".join(stdlib_sources()[:40])
    return T.train_bpe(paragraphs(text[:300_000]), vocab_size=1000, special_tokens=SPECIALS)


def test_training_is_deterministic_within_and_across_processes(tmp_path):
    texts = paragraphs("".join(take(stdlib_sources()[5::9], 300_000)))
    a = T.train_bpe(texts, vocab_size=1200, special_tokens=SPECIALS)
    b = T.train_bpe(iter(texts), vocab_size=1200, special_tokens=SPECIALS)
    assert a.to_str() == b.to_str()
    assert [a.token_to_id(s) for s in SPECIALS] == [0, 1]
    # Rust hash maps are seeded per process: a fresh process must still give the same bytes.
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    code = ("import json,sys; from pathlib import Path; from shardline.data import tokenizer as T; "
            "t=json.loads(Path(sys.argv[1]).read_text()); "
            f"print(T.save(T.train_bpe(t, vocab_size=1200, special_tokens={SPECIALS!r}), Path(sys.argv[2])))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "texts.json"), str(tmp_path / "t.json")],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == fsio.sha256_bytes(a.to_str().encode())


def test_tiktoken_and_fastokens_ids_equal_hf_ids_on_real_text(real):
    tok, evals = real
    hf = T.Encoder.build(tok, backend="hf")
    tt = T.Encoder.build(tok, backend="tiktoken")
    ft = T.Encoder.build(tok, backend="fastokens", probe_texts=evals["stdlib blocks"][:20])
    assert (hf.backend, tt.backend, ft.backend) == ("hf", "tiktoken", "fastokens")
    n_docs = n_tokens = 0
    mismatches = []
    for name, docs in evals.items():
        arrays = tt.encode_arrays(docs), ft.encode_arrays(docs)  # what the tokenize stage writes
        for i, (want, got, fast) in enumerate(zip(hf.encode_batch(docs), tt.encode_batch(docs),
                                                  ft.encode_batch(docs), strict=True)):
            if not want == got == fast == arrays[0][i].tolist() == arrays[1][i].tolist():
                mismatches.append((name, i, docs[i][:60]))
            n_docs += 1
            n_tokens += len(want)
    print(f"{n_docs} docs, {n_tokens} tokens, {len(mismatches)} mismatches; "
          + ", ".join(f"{k}: {len(v)}" for k, v in evals.items()))
    assert not mismatches
    assert n_docs >= 3000
    auto = T.Encoder.build(tok, probe_texts=evals["stdlib blocks"][:200])
    assert auto.backend == "fastokens" and auto.reason == "fastokens ids identical on 200 probe docs"
    assert T.Encoder.build(tok).backend == "tiktoken"  # no probe: only tiktoken's static proof stands


def spacy_languages() -> list[tuple[str, str]]:
    """(language, text) of spaCy's language data files that are >= 10% non-ASCII: stop words, example
    sentences, number words and punctuation of ~40 languages in ~30 scripts, written by their speakers."""
    import spacy

    out = []
    for p in sorted((Path(spacy.__file__).parent / "lang").rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        if len(text) > 500 and sum(ord(c) > 127 for c in text) >= len(text) / 10:
            out.append((p.parent.name, text))
    return out


def test_all_backends_give_hf_ids_with_a_vocabulary_learned_on_non_ascii_text():
    """The same identity with merges inside and across multi-byte characters: a tokenizer trained on
    one half of the languages' files, checked on the other half, with byte fallback on scripts it never saw."""
    files = spacy_languages()
    langs = sorted({lang for lang, _ in files})
    train = [t for lang, t in files if langs.index(lang) % 2 == 0]
    unseen = [q for lang, t in files if langs.index(lang) % 2 for q in paragraphs(t)]
    seen = [q for lang, t in files if langs.index(lang) % 2 == 0 for q in paragraphs(t)]
    tok = T.train_bpe(train, vocab_size=3000, special_tokens=SPECIALS)
    assert sum(any(ord(c) > 127 for c in tok.decode([i])) for i in range(tok.get_vocab_size())) > 1000
    docs = seen + unseen + unicode_sweep() + edge_docs()
    hf = T.Encoder.build(tok, backend="hf")
    tt = T.Encoder.build(tok, backend="tiktoken")
    ft = T.Encoder.build(tok, backend="fastokens", probe_texts=seen[:50])
    want = hf.encode_batch(docs)
    for enc in (tt, ft):
        got = [a.tolist() for a in enc.encode_arrays(docs)]
        bad = [(i, docs[i][:40]) for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g]
        assert not bad, (enc.backend, bad[:5])
    assert len(langs) >= 30 and len(unseen) >= 250 and sum(map(len, want)) > 500_000


def test_special_token_strings_in_text_are_ordinary_text(small):
    text = "a<|endoftext|>b <pad> <|endof <|endoftext|><|endoftext|>\n<pad><pad>"
    assert 0 in small.encode(text, add_special_tokens=False).ids  # what HF does by default
    hf = T.Encoder.build(small, backend="hf").encode_batch([text])
    tt = T.Encoder.build(small, backend="tiktoken").encode_batch([text])
    arrays = T.Encoder.build(small, backend="tiktoken").encode_arrays([text])
    fast = T.Encoder.build(small, backend="fastokens", probe_texts=[text]).encode_arrays([text])
    assert hf == tt == [arrays[0].tolist()] == [fast[0].tolist()] and not {0, 1} & set(hf[0])
    assert small.decode(hf[0]) == text
    assert small.encode_special_tokens is False  # the caller's tokenizer is left as it was


def bytelevel_bpe(merges: list[tuple[str, str]]) -> tokenizers.Tokenizer:
    vocab = {"<|endoftext|>": 0}
    for c in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[c] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def naive_tiktoken(tok: tokenizers.Tokenizer) -> tiktoken.Encoding:
    """Conversion without the safety checks: ranks = HF ids."""
    ranks = {bytes(bytebpe.U2B[c] for c in s): i for s, i in tok.get_vocab().items() if i}
    return tiktoken.Encoding("naive", pat_str=bytebpe.GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 0})


@pytest.mark.parametrize("merges, text, why", [
    # "abc" is only made by (ab, c) but (b, c) ranks first: HF stops at [a, bc], tiktoken
    # joins a+bc because "abc" is in the vocab.
    ([("b", "c"), ("a", "b"), ("ab", "c")], "abc", "not rebuilt from its own bytes"),
    # (a, bc) re-makes "abc" late; tiktoken ranks it as early as (ab, c), ahead of (bc, d).
    ([("b", "c"), ("a", "b"), ("ab", "c"), ("bc", "d"), ("a", "bc")], "abcd", "two merges"),
])
def test_merge_path_edge_cases_differ_naively_and_fall_back(merges, text, why):
    tok = bytelevel_bpe(merges)
    assert naive_tiktoken(tok).encode_ordinary(text) != tok.encode(text).ids
    enc = T.Encoder.build(tok)  # no probe: fastokens is not proven, tiktoken is refused
    assert enc.backend == "hf" and why in enc.reason and "no probe docs" in enc.reason
    assert enc.encode_batch([text]) == [tok.encode(text).ids]


def _wordlevel(_):
    tok = tokenizers.Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _edit_json(small, fn):
    spec = json.loads(small.to_str())
    fn(spec)
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def _swap_merge_ids(spec):  # ids of the first two merge results swapped: not in merge order
    vocab = spec["model"]["vocab"]
    (a1, b1), (a2, b2) = spec["model"]["merges"][:2]
    vocab[a1 + b1], vocab[a2 + b2] = vocab[a2 + b2], vocab[a1 + b1]


def _with(attr, value):
    def make(small):
        tok = tokenizers.Tokenizer.from_str(small.to_str())
        setattr(tok, attr, value)
        return tok
    return make


@pytest.mark.parametrize("make, why", [
    (_wordlevel, "not BPE"),
    (_with("normalizer", normalizers.NFKC()), "normalizer"),
    (_with("pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)), "pre-tokenizer"),
    (lambda s: (t := tokenizers.Tokenizer.from_str(s.to_str()), t.add_tokens(["shard line"]))[0],
     "non-special"),
    (lambda s: _edit_json(s, _swap_merge_ids), "merge order"),
    (lambda s: _edit_json(s, lambda j: j["model"]["merges"].pop()), "come from no merge"),
])
def test_unconvertible_tokenizer_falls_back_or_refuses(small, make, why, monkeypatch):
    tok = make(small)
    fast = T.Encoder.build(tok, probe_texts=["hello world"])  # fastokens runs HF's pipeline: most of these
    assert fast.backend == "fastokens" or fast.reason.startswith("fastokens "), fast.reason
    assert fast.encode_batch(["hello world"])[0] == tok.encode("hello world", add_special_tokens=False).ids
    monkeypatch.setattr(T, "_fastokens", lambda *a, **k: "fastokens left out")
    enc = T.Encoder.build(tok, probe_texts=["hello world"])
    assert enc.backend == "hf" and why in enc.reason and enc.reason.startswith("fastokens left out; "), enc.reason
    assert enc.encode_batch(["hello world"])[0] == tok.encode("hello world", add_special_tokens=False).ids
    with pytest.raises(BadInput, match="tiktoken"):
        T.Encoder.build(tok, backend="tiktoken")


def test_probe_difference_falls_back_naming_the_doc(small, monkeypatch):
    monkeypatch.setattr(bytebpe, "GPT2_PATTERN", r"\S+|\s+")  # a split HF does not use
    monkeypatch.setattr(T, "_fastokens", lambda *a, **k: "fastokens left out")
    enc = T.Encoder.build(small, probe_texts=["hello", "don't stop"])
    assert enc.backend == "hf" and "probe doc 1" in enc.reason
    with pytest.raises(BadInput, match="probe doc 1"):
        T.Encoder.build(small, backend="tiktoken", probe_texts=["hello", "don't stop"])


def test_bad_backend_and_lone_surrogates_are_bad_input(small):
    with pytest.raises(BadInput, match="fastest"):
        T.Encoder.build(small, backend="fastest")
    for backend in ("hf", "tiktoken", "fastokens"):
        with pytest.raises(BadInput, match="document 1 .*surrogate"):
            T.Encoder.build(small, backend=backend).encode_batch(["ok", "a\ud800b"])


def test_save_load_roundtrip_and_hash(small, tmp_path):
    path = tmp_path / "tok" / "tokenizer.json"
    digest = T.save(small, path)
    assert digest == fsio.sha256_file(path) and len(digest) == 64
    assert T.load(path).to_str() == small.to_str()
    assert sorted(p.name for p in path.parent.iterdir()) == ["tokenizer.json"]  # no temp left


@pytest.mark.parametrize("content", [b"\x00\xffgarbage{", b'{"version": "1.0"}', None])
def test_load_unreadable_names_the_file(tmp_path, content):
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(BadInput, match=str(path)):
        T.load(path)


def test_token_id(small):
    assert T.token_id(small, "<pad>") == 1
    with pytest.raises(BadInput, match="<bos>"):
        T.token_id(small, "<bos>")


def test_train_rejects_bad_arguments():
    with pytest.raises(BadInput, match="vocab_size"):
        T.train_bpe(["x"], vocab_size=100, special_tokens=SPECIALS)
    with pytest.raises(BadInput, match="distinct"):
        T.train_bpe(["x"], vocab_size=1000, special_tokens=["<a>", "<a>"])


def test_workers_rebuild_the_drivers_encoder_from_a_recipe_and_refuse_another_tokenizer(small, tmp_path):
    """Tasks carry a Recipe, not the encoder: each process builds it once from the shared
    tokenizer.json, with the backend the driver proved, and never from a file that changed."""
    import shutil

    from shardline.core import fsio
    from shardline.data import tokenize
    from shardline.core.errors import BadInput

    path = tmp_path / "tokenizer.json"
    T.save(small, path)
    recipe = tokenize.Recipe(str(path), fsio.sha256_file(path), "tiktoken")
    enc = tokenize.encoder_for(recipe)
    assert enc is tokenize.encoder_for(recipe) and enc.backend == "tiktoken"  # built once per process
    text = ["def f(x):\n    return x + 1  # ünïcode"]
    assert enc.encode_batch(text) == T.Encoder.build(small, backend="hf").encode_batch(text)
    other = tmp_path / "other.json"
    shutil.copy(path, other)
    with open(other, "a") as f:
        f.write(" ")
    with pytest.raises(BadInput, match="not the tokenizer this stage started with"):
        tokenize.encoder_for(tokenize.Recipe(str(other), recipe.sha256, "tiktoken"))
