"""Intervals over held-out documents (shardline.training.noise): the bootstrap as documented, pinned
to literal answers, and the flags a thin or too easy held-out set raises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardline.training import noise

# five documents: nats summed, targets, bytes (a long easy one, and four short hard ones)
DOCS = noise.Docs(np.array([300.0, 50.0, 44.0, 60.0, 40.0]), np.array([200.0, 10.0, 8.0, 12.0, 9.0]),
                  np.array([800.0, 40.0, 30.0, 50.0, 33.0]), np.arange(5))


def _by_hand(docs: noise.Docs, figure: str) -> list[float]:
    """The documented bootstrap written out plainly: RESAMPLES draws of n documents with replacement from
    PCG64(SEED), CHUNK at a time, each figure a ratio of sums over the drawn documents, then the 2.5th
    and 97.5th percentiles."""
    rng = np.random.Generator(np.random.PCG64(noise.SEED))
    vals = []
    for start in range(0, noise.RESAMPLES, noise.CHUNK):
        for row in rng.integers(0, len(docs), size=(min(noise.CHUNK, noise.RESAMPLES - start), len(docs))):
            nll, tg, by = docs.nll[row], docs.targets[row], docs.bytes[row]
            vals.append({"loss": nll.sum() / tg.sum(), "bpb": nll.sum() / math.log(2) / by.sum(),
                         "doc_loss": (nll / tg).mean()}[figure])
    return list(np.percentile(vals, [2.5, 97.5]))


@pytest.mark.parametrize("figure", noise.FIGURES)
def test_the_interval_is_the_documented_bootstrap(figure):
    assert noise.interval(DOCS)[figure] == pytest.approx(_by_hand(DOCS, figure), rel=1e-12)


def test_the_figures_and_interval_are_pinned():
    f = DOCS.figures()
    # per token the long easy document is 200 of 239 targets: 494 / 239; per document each counts once
    assert (f["loss"][0], f["doc_loss"][0]) == pytest.approx((494 / 239, (1.5 + 5 + 5.5 + 5 + 40 / 9) / 5))
    ci = noise.interval(DOCS)
    # recorded once from this bootstrap (its algorithm is checked against the plain one above): a change of seed,
    # resamples or percentiles moves every interval the line has reported, and must show here
    assert ci["loss"] == pytest.approx([1.6084142394822007, 5.166666666666667], rel=1e-12)
    assert ci["doc_loss"] == pytest.approx([2.7888888888888888, 5.2], rel=1e-12)


def test_the_same_documents_always_give_the_same_interval():
    assert noise.interval(DOCS) == noise.interval(noise.Docs(DOCS.nll.copy(), DOCS.targets.copy(), DOCS.bytes.copy()))


def test_a_run_against_itself_changes_nothing_within_noise():
    d = noise.difference(DOCS, DOCS)
    assert all(d[k]["change"] == 0 and d[k]["interval"] == [0.0, 0.0] and d[k]["within_noise"] for k in noise.FIGURES)


def test_a_shift_on_every_document_is_beyond_noise_however_different_the_documents():
    shifted = noise.Docs(DOCS.nll + 0.1 * DOCS.targets, DOCS.targets, DOCS.bytes, DOCS.ids)  # +0.1 nats every token
    d = noise.difference(DOCS, shifted)["loss"]
    assert d["change"] == pytest.approx(0.1) and d["interval"] == pytest.approx([0.1, 0.1])
    assert not d["within_noise"] and d["docs"] == 5
    # the same shift on documents that are not the same ones (resampled each on its own) is within their noise
    assert noise.difference(DOCS, shifted, independent=True)["loss"]["within_noise"]


def test_documents_pair_by_their_ids():
    a = noise.Docs(np.array([1.0, 2.0, 3.0]), np.ones(3), np.ones(3), np.array([4, 7, 9]))
    b = noise.Docs(np.array([5.0, 6.0]), np.ones(2), np.ones(2), np.array([7, 8]))
    x, y = noise.paired(a, b)
    assert (x.nll.tolist(), y.nll.tolist(), x.ids.tolist()) == ([2.0], [5.0], [7])


def test_the_equal_weight_total_interval_averages_the_sources_draws():
    lo, hi = noise.total_interval([DOCS, DOCS])["loss"]
    one = noise.interval(DOCS)["loss"]
    # two sources drawn independently (not the same draws twice): their mean's interval is narrower than one's
    assert one[0] < lo < hi < one[1]


def test_documents_needed_for_a_half_width():
    assert noise.needed(63, 0.335, 0.05) == math.ceil(63 * (0.335 / 0.05) ** 2) == 2829
    assert noise.needed(4, 0.01, 0.05) == noise.MIN_DOCS  # never fewer than a bootstrap can be trusted on


def test_a_thin_source_is_one_line_with_the_documents_it_needs():
    fig = {"docs": 11, "tokens": 6400, "loss_ci": [5.53, 6.0]}
    assert noise.thin("prose", fig, 0.05) == (
        "prose is judged on 11 held-out document(s) (6,400 tokens): its loss is known to ±0.235 nats; ±0.05 "
        "(eval.resolution) needs about 243 documents (raise eval.fraction or eval.min_docs)")
    assert noise.thin("code", {"docs": 500, "tokens": 1, "loss_ci": [4.0, 4.08]}, 0.05) is None


def test_a_held_out_set_easier_or_harder_than_training_is_said():
    rows = [{"step": s, "loss": 4.88 + (0.01 if s % 2 else -0.01)} for s in range(1, 151)]
    train = noise.recent_train_loss(rows, 150)
    assert train[0] == pytest.approx(4.88) and train[2] == noise.RECENT_STEPS
    said = noise.against_training({"loss": 3.66, "loss_ci": [3.4, 3.9]}, train)
    assert said.startswith("held-out loss 3.660 (by this run's mix) is 1.220 nats below the training loss of the "
                           "last 20 steps (4.880)")
    assert noise.against_training({"loss": 4.80, "loss_ci": [4.5, 5.1]}, train) is None  # below, but within their noise
    above = noise.against_training({"loss": 5.5, "loss_ci": [5.4, 5.6]}, train, "prose 2.2 times")
    assert above == ("held-out loss 5.500 (by this run's mix) is 0.620 nats above the training loss of the last 20 steps "
                     "(4.880), more than their noise (±0.100): the model does better on text it trains on than on unseen "
                     "text (training repeats prose 2.2 times)")
