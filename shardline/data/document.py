"""A document as the clean stage's rules see it: its text, its stable id, its URL (a WARC
record's; None for every other format) and its metadata, datatrove's `Document` in shape.

Contract: the readers make one per record (`readers.documents`); the rules read it and answer
the text they keep or a `Drop` (`clean/verdict.py`). It is mutable on purpose, and only in two
ways: `rules.apply` puts a transform's text in `text`, and a rule that measures something the
clean parts keep writes it in `metadata` (the language rule: `language`, `language_score`, the
keys datatrove's LanguageFilter writes). Readers put what a record carries besides its text in
`metadata` too (a WARC record's `date`). Slotted: one is made per document on the hot path.
"""

from __future__ import annotations


class Document:
    __slots__ = ("text", "id", "url", "metadata")

    def __init__(self, text: str, id: str = "", url: str | None = None, metadata: dict | None = None):
        self.text = text
        self.id = id
        self.url = url
        self.metadata = {} if metadata is None else metadata

    def __repr__(self) -> str:
        return f"Document(id={self.id!r}, url={self.url!r}, text={self.text[:40]!r}..., metadata={self.metadata!r})"
