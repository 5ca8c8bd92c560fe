"""Faults of the disk itself, caused for real rather than raised: a read-only file system and a
full one, each a small tmpfs mounted for the test (root only: it skips, saying so, elsewhere).
What a user gets is one line naming the path and what to do, and nothing half-written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.test_cli_errors import SL, trained  # noqa: F401 (the fixture)
from tests.conftest import run


@pytest.fixture
def mount(tmp_path):
    made = []

    def at(name: str, options: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): no real disk fault to cause")
        made.append(d)
        return d

    yield at
    for d in made:
        subprocess.run(["umount", str(d)], check=False)


def test_export_to_a_read_only_file_system_is_one_line(trained, mount):
    ro = mount("ro", "ro,size=1m")
    r = run([SL, "export", "latest", str(ro / "model")], trained, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: OUT_DIR {ro / 'model'}: read-only file system; pick a path on a writable file system" in r.stderr


def test_export_to_a_full_disk_is_one_line_and_leaves_no_partial_file(trained, mount):
    full = mount("full", "size=64k")  # the model's weights alone are more than this
    r = run([SL, "export", "latest", str(full / "model")], trained, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: no space left on the device while writing OUT_DIR {full / 'model'}" in r.stderr, r.stderr
    left = [p.name for p in full.rglob("*") if p.is_file()]
    assert not [n for n in left if ".tmp" in n], left  # no temp file stays behind
