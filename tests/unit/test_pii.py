"""The PII rule next to its reference, datatrove 0.10.1's PIIFormatter itself (a fresh one per
document: its replacement cycle is kept on the formatter, ours restarts with each document):
exact string equality on hand-written edge cases, on random strings made of the characters that
matter, on the standard library's sources and, when ../shared/corpora is present, on its corpora.
"""

import json
import pickle

import pytest
from datatrove.pipeline.formatters import PIIFormatter
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.data.clean.rules.pii import PiiRule
from shardline.data.document import Document as D
from tests.conftest import CORPORA, STDLIB

CASES = [
    # e-mail addresses
    "write to jane.doe@example.com today", "a+tag@gmail.com", "x@mail.sub.example.co.uk.",
    "first.last+filter@dept.uni.ac.at, second@b.io; third@c.de", "<a href='mailto:bob@corp.com'>bob</a>",
    "https://user:pw@host.example.com/path?q=1", "https://user@host.com/x", "git@github.com:org/repo.git",
    "@handle and @@double and a@b and a@b. and a@.com", "root@localhost", "name@[192.168.1.1] and n@[8.8.8.8]",
    "n@[IPv6:2001:db8::1]", "n@[abc:]", "n@[1.2.3.4", "\"quoted name\"@example.com", "o'brien@example.ie",
    "müller@example.de", "mü.ller@example.de", "ünicode@exämple.com", "user@exämple.com", "user@example.cöm",
    "a.@b.com", ".a@b.com", "a..b@c.com", "a@b-.com", "a@-b.com", "a@b.c-d.e", "a@b..com",
    "user_name@sub-domain.example.museum", "UPPER@EXAMPLE.COM", "123@456.789", "x@1.2.3.4",
    "email@example.com", "email@example.com and x@y.z", "firstname.lastname@example.org then a@b.cd",
    "very.long." * 20 + "x@" + "sub." * 30 + "com", "a@b.c@d.e", "a@b.com@c.org", "a@b,c@d.com",
    "(contact: me@here.org)", "[me@here.org](mailto:me@here.org)", "me@here.org.", "me@here.org-",
    "_x@y.com", "-x@y.com", "é-x@y.com", "xé@y.com", "x\u00a0y@z.com", "tab\tx@y.com\nnext@line.org",
    "@-@ starring @,@ 1 @.@ 5 (wikitext tokens)", "emails: a@b.co, c@d.co, e@f.co, g@h.co, i@j.co",
    # IPv4 addresses
    "server at 8.8.8.8 and 1.1.1.1", "255.255.255.255", "0.0.0.0", "10.0.0.1", "192.168.1.254",
    "172.16.0.1 172.31.255.255 172.32.0.1", "127.0.0.1", "169.254.1.1", "100.64.0.1", "100.128.0.1",
    "192.0.2.1 198.51.100.7 203.0.113.9", "198.18.0.1", "224.0.0.1 239.255.255.250", "240.0.0.1",
    "192.0.0.9 192.0.0.170 192.0.0.8", "01.2.3.4", "1.02.3.4", "001.2.3.4", "8.8.8.08", "00.0.0.0",
    "1.2.3.4.5", "v1.2.3.4.5.6.7.8", "256.1.1.1", "1.2.3.456", "1234.5.6.7", "999.999.999.999",
    "8.8.8.8:53", "8.8.8.8/24", "[8.8.8.8]", "http://93.184.216.34/index.html", "ip=93.184.216.34;",
    "version 3.11.7.1 and 2.7.18", "on 12.03.2024 at 10.30", "dates 1.1.2020, 31.12.1999", "1.2.3.",
    "8.8.8.8.8.8.8.8", "1.1.1.1 1.1.1.1 1.1.1.1 1.1.1.1 1.1.1.1 1.1.1.1 1.1.1.1", "x8.8.8.8y", "8. 8.8.8",
    "HTML5 spec 8.2.4.44 Bogus comment", "١.٢.٣.٤ (Arabic-Indic digits)", "８.８.８.８ (fullwidth)",
    "2001:db8::1 and ::ffff:8.8.8.8", "fe80::1%eth0", "::1", "1.2.3.4e5", "0x8.0x8.0x8.0x8", "3.14159.26.5",
    # both, and neither
    "a@8.8.8.8 b@[8.8.8.8] 8.8.8.8", "nothing here", "", "@", ".", "....", "1.2.3", "a@b.com 10.0.0.1 9.9.9.9",
    "no pii, just prose. With numbers 1, 2.5 and 3.75%.", "email@example.com 22.214.171.124",
]


def reference(text: str) -> str:
    return PIIFormatter().format(text)


def assert_agree(texts):
    rule = PiiRule()
    differ = [(t[:80], rule(D(t))[:80], reference(t)[:80]) for t in texts if rule(D(t)) != reference(t)]
    assert not differ, (len(differ), differ[:3])


def test_hand_written_cases_agree():
    assert len(CASES) >= 100
    assert_agree(CASES)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789..@@ab-_+[]:éx\n ", max_size=60))
def test_random_strings_of_the_characters_that_matter_agree(text):
    assert_agree([text])


def test_stdlib_sources_agree():
    files = (sorted(STDLIB.glob("*.py")) + sorted(STDLIB.glob("*/*.py")))[:200]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    assert sum(PiiRule()(D(t)) is not t for t in texts) >= 10  # real addresses are in there (author lines)
    assert_agree(texts)


def test_real_corpora_agree():
    if not CORPORA.exists():
        pytest.skip(f"real corpora not present ({CORPORA})")
    texts = [json.loads(line)["text"] for p in sorted(CORPORA.glob("*.jsonl")) for line in p.open(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in sorted(CORPORA.glob("*.txt"))]
    assert_agree(texts)


def test_known_answers():
    rule = PiiRule()
    assert rule(D("Mail a.b+c@x.co.uk or d@e.org from 8.8.8.8, not 10.0.0.1")) == \
        "Mail email@example.com or firstname.lastname@example.org from 22.214.171.124, not 10.0.0.1"
    assert rule(D("hosts 1.1.1.1 127.0.0.1 9.9.9.9 01.2.3.4 256.1.1.1")) == \
        "hosts 22.214.171.124 127.0.0.1 126.96.36.199 01.2.3.4 2188.8.131.52"
    assert rule(D("spec 8.2.4.44 and v1.2.3.4.5")) == "spec 22.214.171.124 and v126.96.36.199.5"


def test_flags_unchanged_text_and_pickling():
    text = "x@y.com 8.8.8.8"
    assert PiiRule(emails=False)(D(text)) == "x@y.com 22.214.171.124"
    assert PiiRule(ips=False)(D(text)) == "email@example.com 8.8.8.8"
    assert PiiRule(emails=False, ips=False)(D(text)) is text
    for same in ("plain prose", "10.0.0.1 and 1.2.3", "email@example.com"):  # the last: replaced by itself
        assert PiiRule()(D(same)) is same
    assert pickle.loads(pickle.dumps(PiiRule())) == PiiRule()


def test_the_clean_stage_replaces_addresses_last_and_counts_the_bytes(tmp_path):
    import json

    import pyarrow.parquet as pq

    from shardline.data import download
    from shardline.data.clean.stage import run as clean
    from tests.conftest import make_project

    text = "Write to jane.doe+lists@mail.example.com or ping 8.8.8.8 about the garden club's meeting times."
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(json.dumps({"text": text}) + "\n")
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval={"fraction": 0, "min_docs": 0, "every": 0}, clean={"pii": {"ips": False}})
    download.run(params, layout, log=lambda _: None)
    stats = clean.run(params, layout, log=lambda _: None)["sources"]["s"]
    kept = pq.read_table(layout.clean / "s" / "part-00000.parquet").column("text").to_pylist()
    assert kept == [text.replace("jane.doe+lists@mail.example.com", "email@example.com")]
    assert stats["rules"]["pii"] == {"docs": 0, "bytes": len(text) - len(kept[0])}
    assert clean.rules.names(params.clean)[-1] == "pii"
