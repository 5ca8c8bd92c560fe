"""The chaos comparison leaves out of the evidence card exactly its timing lines (harness.chaoscheck):
a killed run and an unkilled one of the same line differ in how fast their steps went, never in
what they trained on or measured. CI (stop 46) saw a card's "the slowest, step ..." line, under
its slow-step count, differ between the two: a timing line the filter did not know."""

from __future__ import annotations

from harness import chaoscheck


def card(fast: bool) -> str:
    timing = (["- median 29,336 tokens/s over 16 steps", "- p95 step time 0.030 s (median 0.017 s)",
               "- data wait 14.99% of step time; mean MFU (estimate) 5.7%",
               "4 eval(s), 0.1 s in all = 36.9% of the 0.3 s of training steps.",
               "- slow steps: 0 (0 input-bound, 0 compute-bound)"] if fast else
              ["- median 19,111 tokens/s over 16 steps", "- p95 step time 0.061 s (median 0.029 s)",
               "- data wait 10.58% of step time; mean MFU (estimate) 4.6%",
               "4 eval(s), 0.2 s in all = 30.7% of the 0.5 s of training steps.",
               "- slow steps: 2 (0 input-bound, 2 compute-bound)",
               "  - the slowest, step 14 (0.068 s, compute-bound): profile it where training next reaches it with "
               "`dvc exp run -S 'train.profile={start_step:14,steps:3}'` (train.profile)",
               "- the slowest step, 14: code: a.py:1 and 31 more (`shardline explain --step 14` lists every row and "
               "token range)"])
    return "\n".join(["# Evidence card", "- held-out loss 5.61 (code)", *timing, "- rollbacks (loss spikes): 0"])


def kept(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not chaoscheck.CARD_VARYING.search(ln)]


def test_cards_that_differ_only_in_timing_compare_equal_and_others_do_not():
    assert kept(card(True)) == kept(card(False)) == ["# Evidence card", "- held-out loss 5.61 (code)",
                                                     "- rollbacks (loss spikes): 0"]
    assert kept(card(True).replace("5.61", "5.62")) != kept(card(False))
