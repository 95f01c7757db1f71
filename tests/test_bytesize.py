"""Byte-size options take 1G, 512M, 64k or bytes (issue 43): one parser, one clear error."""
from __future__ import annotations

import json

import pytest

from carla_wds.bytesize import parse_bytes


@pytest.mark.parametrize("text, value", [
    ("4096", 4096), ("64k", 64 << 10), ("64K", 64 << 10), ("512M", 512 << 20), ("1G", 1 << 30),
    ("1.5G", 3 << 29), ("1GiB", 1 << 30), ("2 MB", 2 << 20), ("1t", 1 << 40), (0, 0), ("-5", -5)])
def test_units_are_binary(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "G", "1X", "--1G", "1e3", "nan", "1GG", "inf", "1 G B"])
def test_anything_else_says_what_is_expected(text):
    with pytest.raises(ValueError, match="expected a byte count such as 1G, 512M, 64k"):
        parse_bytes(text)


def test_pack_takes_units_and_names_a_bad_value(raw_tcp, tmp_path, cli):
    units = cli("pack", raw_tcp, tmp_path / "units", "--max-bytes", "48k", "--spool-bytes", "1G")
    plain = cli("pack", raw_tcp, tmp_path / "plain", "--max-bytes", str(48 << 10))
    assert units.exit_code == 0 and plain.exit_code == 0, units.output + plain.output
    shards = [json.loads((tmp_path / d / "manifest.json").read_text())["shards"]
              for d in ("units", "plain")]
    assert shards[0] == shards[1] and len(shards[0]) > 1
    bad = cli("pack", raw_tcp, tmp_path / "bad", "--max-bytes", "12Q")
    assert bad.exit_code == 2 and "Invalid value for '--max-bytes': '12Q': expected a byte " \
        "count such as 1G" in bad.output and not (tmp_path / "bad").exists()
    helped = cli("pack", "--help").output
    assert "[default: 1G]" in " ".join(helped.split())


def test_synth_options_have_help(cli):
    text = " ".join(cli("synth", "--help").output.split())
    for option, words in (("--episodes", "Routes (clips) to write"), ("--frames", "Frames per "
                          "route"), ("--seed", "Random seed")):
        assert f"{option} INTEGER {words}" in text
