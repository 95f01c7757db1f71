"""A source with no manifest, recognised for what it is (issue 43): raw route folders say to
pack first, a shard file or a brace pattern says to pass the pack's folder. One message, from
manifest_hint.no_manifest, in the loader, `inspect`, `verify` and `view` alike."""
from __future__ import annotations

import shutil

import pytest

from carla_wds import CARLAWebData


def _errors(source, cli, tmp_path) -> list[str]:
    """The message of each of the four readers given `source`, whitespace folded."""
    with pytest.raises(FileNotFoundError) as caught:
        CARLAWebData(str(source), batch_size=2)
    out = [str(caught.value)]
    for args in (["inspect", source], ["verify", source],
                 ["view", source, "--out", tmp_path / "v.html"]):
        result = cli(*args)
        assert result.exit_code == 1 and result.output.startswith("Error: "), result.output
        out.append(result.output)
    assert not (tmp_path / "v.html").exists()
    return [" ".join(o.split()) for o in out]


def test_raw_route_folders_say_pack_first(raw_tcp, cli, tmp_path):
    for text in _errors(raw_tcp, cli, tmp_path):
        assert f"{raw_tcp} looks like raw route folders or archives of them (e.g. " \
               "Town01/routes_town01_00/measurements/0000.json)" in text
        assert f"Fix: run `carla-wds pack {raw_tcp} OUT --layout LAYOUT` first" in text


def test_a_shard_file_or_pattern_says_pass_the_folder(zoo, cli, tmp_path):
    pack = zoo()
    fix = f"Fix: pass the folder with manifest.json ({pack}), which names every shard"
    for text in _errors(pack / "shard-000000.tar", cli, tmp_path):
        assert "shard-000000.tar is a file (one shard?), not a pack" in text and fix in text
    for text in _errors(f"{pack}/shard-{{000000..000003}}.tar", cli, tmp_path):
        assert "is a pattern of shard names" in text and fix in text


def test_shards_without_a_manifest_say_finish_the_pack(zoo, cli, tmp_path):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    shutil.copy(zoo() / "shard-000000.tar", unfinished)
    for text in _errors(unfinished, cli, tmp_path):
        assert "holds 1 shard file (e.g. shard-000000.tar) but no manifest.json" in text
        assert "--resume" in text


def test_anything_else_keeps_the_plain_message(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    for text in _errors(tmp_path / "empty", cli, tmp_path):
        assert f"no manifest at {tmp_path / 'empty' / 'manifest.json'}; expected a folder " \
               "written by `carla-wds pack`" in text
