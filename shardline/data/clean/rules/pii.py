"""PII replacement: e-mail addresses and public IPv4 addresses, exactly as datatrove 0.10.1's
`PIIFormatter()` with its defaults replaces them (its regexes, its validity check, its replacements).

Contract: `PiiRule()(text)` equals `PIIFormatter().format(text)` for a formatter made fresh for that
document. datatrove cycles through its replacement lists with a counter kept on the formatter, so
its output for a document depends on how many addresses the documents before it (on that worker)
had; here the cycle restarts with every document, so the answer depends on the document alone.
Unchanged text comes back as the same object (callers test `out is text`). `Pii` is its setting
(the clean section's `pii`), `PII` its registry entry.

Caught:
- e-mail addresses: RFC 5322-ish ASCII local part (letters, digits, ``!#$%&'*+/=?^_`{|}~-`` and
  inner dots), `@`, then dot-separated ASCII labels (`a@b.c`, `x+tag@mail.sub.example.co.uk`) or a
  bracketed IPv4 literal (`a@[1.2.3.4]`); the local part must start at a word boundary. The whole
  address is replaced, in turn, by `email@example.com` and `firstname.lastname@example.org`.
  Found anywhere: inside URLs (`https://user@host.com/...` loses `user@host.com`), markup and code.
- IPv4 dotted quads of decimal octets 0-255 that Python's `ipaddress` (this interpreter's tables)
  calls global; replaced, in turn, by six fixed addresses (22.214.171.124, ...). No word boundary
  is required, so version numbers and section numbers that read as public addresses are replaced
  too ("HTML5 spec 8.2.4.44" -> "22.214.171.124"), as is the tail of a longer run
  (`1.2.3.4.5` -> replacement + `.5`; `256.1.1.1` -> `2` + replacement of 56.1.1.1).
Not caught (left as they are):
- IPv4 addresses that are not global: 0/8, private 10/8, 172.16/12, 192.168/16, loopback 127/8,
  link-local 169.254/16, shared 100.64/10, 192.0.0/29, the documentation nets 192.0.2/24,
  198.51.100/24, 203.0.113/24, benchmarking 198.18/15, reserved 240/4 and 255.255.255.255: they
  identify no one. (Multicast 224/4 counts as global and is replaced.)
- quads with a leading zero in an octet (`01.2.3.4`): `ipaddress` rejects them, so does datatrove.
- IPv6 addresses (only an embedded IPv4 tail, `::ffff:8.8.8.8`, is caught, as IPv4); ports and
  CIDR suffixes stay (`8.8.8.8:53` -> `22.214.171.124:53`).
- e-mail addresses with non-ASCII letters (`müller@x.de` is left whole: no word boundary before
  `ller`), obfuscated ones (`name at example dot com`), ones with no dot in the domain
  (`root@localhost`).
- phone numbers, names, street addresses, IDs, credit cards, keys and secrets: none are looked for.

Design: both regexes only match ASCII runs without whitespace, so each is run (with pos/endpos,
on the whole string, so `\\b` sees the real previous character) only on the maximal run of the
characters it can match around an `@`, or around `.<1-3 digits>.<digit>` (every quad has one):
the same matches as a scan of the whole text, found without trying every position of it.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

from pydantic import Field

from shardline.core.section_base import _Section
from shardline.data.clean.verdict import RuleEntry
from shardline.data.document import Document

# datatrove 0.10.1's patterns, verbatim
_EMAIL = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[A-Za-z0-9](?:["
    r"A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|["
    r"01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])"
)
_IP = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)")
EMAIL_REPLACEMENTS = ("email@example.com", "firstname.lastname@example.org")
IP_REPLACEMENTS = ("22.214.171.124", "126.96.36.199", "188.8.131.52", "184.108.40.206", "220.127.116.11",
                   "18.104.22.168")

# every character either pattern can match; a match never leaves a run of them
_EMAIL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~-.@[]:")
_IP_CHARS = frozenset("0123456789.")
_EMAIL_TAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.@\[\]:-]*")
_IP_TAIL = re.compile(r"[0-9.]*")
# the second and third octets of any quad: a literal first character lets re skip ahead with memchr
_IP_HINT = re.compile(r"\.[0-9]{1,3}\.[0-9]")


@functools.lru_cache(maxsize=1 << 16)
def is_public(quad: str) -> bool:
    """datatrove's validator with only_remove_public_ips=True (its default); version strings
    repeat, hence the cache."""
    try:
        return ipaddress.ip_address(quad).is_global
    except ValueError:  # a leading zero
        return False


def _runs(text: str, starts, chars: frozenset, tail: re.Pattern):
    """The maximal runs of `chars` that contain each position in `starts` (ascending), once each."""
    end = -1
    for at in starts:
        if at < end:
            continue
        s = at
        while s > 0 and text[s - 1] in chars:  # runs are short: an address, a version number
            s -= 1
        end = tail.match(text, at).end()
        yield s, end


def _replace(text: str, pattern: re.Pattern, runs, replacements: tuple[str, ...], valid=None) -> str:
    out, last, i = [], 0, 0
    for s, e in runs:
        for m in pattern.finditer(text, s, e):
            if valid is not None and not valid(m.group()):
                continue  # datatrove puts the match back and does not advance the cycle
            out += (text[last:m.start()], replacements[i])
            last, i = m.end(), (i + 1) % len(replacements)
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _ats(text: str):
    at = text.find("@")
    while at >= 0:
        yield at
        at = text.find("@", at + 1)


def replace_emails(text: str) -> str:
    if "@" not in text:
        return text
    return _replace(text, _EMAIL, _runs(text, _ats(text), _EMAIL_CHARS, _EMAIL_TAIL), EMAIL_REPLACEMENTS)


def replace_ips(text: str) -> str:
    hints = (m.start() for m in _IP_HINT.finditer(text))
    return _replace(text, _IP, _runs(text, hints, _IP_CHARS, _IP_TAIL), IP_REPLACEMENTS, is_public)


class Pii(_Section):
    """Personal data replaced as datatrove's PIIFormatter does (its patterns and replacements; see
    above for exactly what is and is not caught). A transform, run last, after every
    filter: the filters judge the text as written."""

    emails: bool = True
    """Replace e-mail addresses with email@example.com / firstname.lastname@example.org."""
    ips: bool = True
    """Replace public IPv4 addresses with one of datatrove's six replacement addresses."""


@dataclass(frozen=True)
class PiiRule:
    """Replace e-mail addresses (`emails`) and public IPv4 addresses (`ips`), e-mails first, as
    datatrove does (an address literal `a@[8.8.8.8]` goes with its e-mail)."""

    emails: bool = True
    ips: bool = True
    name = "pii"

    def __call__(self, doc: Document) -> str:
        text = doc.text
        out = replace_emails(text) if self.emails else text
        out = replace_ips(out) if self.ips else out
        # a replacement can equal what it replaced (the text already said email@example.com)
        return text if out is text or out == text else out


PII = RuleEntry("pii", Pii | None,
            Field(None, description="Replace e-mail and IP addresses (`{}`: both), counted like a transform (bytes "
                  "changed)."),
            lambda v, _files: PiiRule(v.emails, v.ips) if v is not None else None)
