"""The URL blocklist (`clean.url_blocklist`): documents from listed domains are dropped, counted
and sampled as the check `url_blocklist`, like any rule.

Contract: the list is a local text file, one domain per line (`#` starts a comment, blank lines
and a leading `*.` or `.` are ignored, case does not matter). A URL is blocked when its host is
a listed domain or a subdomain of one (`ads.example.com` is blocked by `example.com`, and
`notexample.com` is not). `UrlBlocklist` is the rule: it reads the document's `url`, so only
documents with one (WARC records) are judged. The file's sha256 is part of the rules' key, so an
edited list is a new data version. `URL_BLOCKLIST` is its registry entry, first in the rules'
order: a blocked page is dropped before its text is read.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import Field

from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

NAME = "url_blocklist"
URL_BLOCKLIST = RuleEntry(NAME, str | None, Field(None, description=(
    "A local text file of domains, one per line (relative to the project): documents whose URL's host is one of them "
    "or a subdomain are dropped, counted as the check `url_blocklist` (only documents with a URL: WARC records). "
    "Judged first, before every rule; its sha256 is part of the rules' key.")),
    lambda v, files: UrlBlocklist(*files.blocklist) if v and files and files.blocklist else None)


@functools.lru_cache(maxsize=2)
def _domains(path: str, digest: str) -> frozenset[str]:  # digest: a new list is a new cache entry
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            d = line.split("#", 1)[0].strip().lower().removeprefix("*.").strip(".")
            if d:
                out.add(d)
    return frozenset(out)


def blocked(url: str, path: str, digest: str) -> Drop | None:
    """The Drop for a URL whose host (or a parent domain of it) is listed, else None."""
    try:
        host = (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:  # a malformed URL has no host to judge
        return None
    domains = _domains(path, digest)
    try:  # an address is listed whole or not at all: "3.4" must not block 1.2.3.4
        ipaddress.ip_address(host.strip("[]"))
        return Drop(NAME, host, host) if host.strip("[]") in domains else None
    except ValueError:
        pass
    labels = host.split(".")
    for i in range(len(labels) - 1 if len(labels) > 1 else 1):
        if ".".join(labels[i:]) in domains:
            return Drop(NAME, host, ".".join(labels[i:]))
    return None


@dataclass(frozen=True)
class UrlBlocklist:
    """The rule: `path` the list, `digest` its sha256 (which list is cached)."""

    path: str
    digest: str
    name = NAME

    def __call__(self, doc: Document) -> "str | Drop":
        if doc.url is None:
            return doc.text
        return blocked(doc.url, self.path, self.digest) or doc.text
