"""`pack-status` prints what failure markers say (issue 38, low 8): a marker is a file anyone
with write access to OUT can change, so its text is printed as one safe line: a newline cannot
forge the `--array=` list a script reads, an escape sequence cannot drive the terminal."""
from __future__ import annotations

import json

import pytest

from carla_wds.pack.cluster import printable


@pytest.fixture
def planned(raw_tcp, tmp_path, cli):
    out = tmp_path / "out"
    assert cli("plan", raw_tcp, out, "--layout", "tcp", "--parts", "3").exit_code == 0
    return out


def test_pack_status_escapes_a_markers_control_characters(planned, cli):
    error = "boom\n--array=0-999\r\x1b]0;pwned\x07\x1b[2J\u202etxt.exe"
    (planned / "parts").mkdir()
    (planned / "parts" / "00001.failed").write_text(json.dumps({"error": error}))
    result = cli("pack-status", planned)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "failed   parts/00001: boom\\n--array=0-999\\r\\x1b]0;pwned\\x07\\x1b[2J\\u202etxt.exe",
        "0 done, 0 running, 1 failed, 2 missing of 3 parts",
        "--array=0-2",
    ]


def test_printable_keeps_text_and_bounds_length():
    assert printable("a part's error: é, 日本, tab\there") == \
        "a part's error: é, 日本, tab\\there"
    long = printable("x" * 5000)
    assert long.startswith("x" * 2000 + "... (5000 characters)") and len(long) < 2100
    assert printable({"not": "text"}) == "{'not': 'text'}"
