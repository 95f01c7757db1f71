"""Smaller findings of issue 43: counts read "1 shard", not "1 shards"; the fsspec hint names
the package of the URL's protocol; synth logs image sizes as HxW, labelled."""
from __future__ import annotations

import logging

import pytest

from carla_wds.objstore import filesystem
from carla_wds.remote import RemoteError, RemoteOptions
from carla_wds.words import counted


def test_counted_is_singular_for_one():
    assert counted(1, "shard") == "1 shard" and counted(0, "shard") == "0 shards"
    assert counted(12, "route tail") == "12 route tails"
    assert counted(1, "boxes entry") == "1 boxes entry"
    assert counted(2, "boxes entry") == "2 boxes entries" and counted(2, "day") == "2 days"


def test_one_route_one_shard_reads_singular(synth, tmp_path, cli, caplog):
    raw = synth(tmp_path / "raw", "tcp", episodes=1, frames=8)
    with caplog.at_level(logging.INFO):
        made = cli("synth", tmp_path / "cli_raw", "--layout", "tcp", "--episodes", "1",
                   "--frames", "8", "--image-size", "48x64")
        packed = cli("pack", raw, tmp_path / "p")
    assert "wrote 1 route of 8 frames" in made.output
    assert "wrote 1 tcp route of 8 frames (48x64, HxW)" in caplog.text
    assert packed.output.startswith("4 samples in 1 shard; 8 frames found, 4 route tails")
    assert "packed 4 samples into 1 shard in" in caplog.text
    assert cli("inspect", tmp_path / "p").output.startswith("4 samples in 1 shard, ")


def test_b2d_synth_logs_its_size_as_hxw(tmp_path, caplog):
    pytest.importorskip("h5py")
    from carla_wds.pack.synth import synth_dataset
    with caplog.at_level(logging.INFO):
        synth_dataset(tmp_path, "bench2drive", episodes=1, frames=2, image_size=(45, 80),
                      progress=False)
    assert "wrote 1 bench2drive clip of 2 frames (45x80, HxW)" in caplog.text


@pytest.mark.parametrize("url, fix", [("gs://bucket/pack", "pip install gcsfs"),
                                      ("abfs://c/pack", "pip install adlfs"),
                                      ("nosuch://b/pack", "pip install the fsspec package that "
                                                          "reads nosuch://")])
def test_the_fsspec_hint_names_the_protocols_package(url, fix):
    pytest.importorskip("fsspec")
    try:
        filesystem(url, RemoteOptions())
    except RemoteError as exc:
        assert f"Fix: {fix}" in str(exc) and "[s3]" not in str(exc)
    else:
        pytest.skip(f"{url.split(':')[0]}'s fsspec package is installed here")


def test_the_view_report_counts_one_shard_as_one(synth, tmp_path, cli):
    raw = synth(tmp_path / "raw", "tcp", episodes=1, frames=8)
    assert cli("pack", raw, tmp_path / "p").exit_code == 0
    made = cli("view", tmp_path / "p", "--out", tmp_path / "v.html", "-n", "2")
    assert made.exit_code == 0, made.output
    page = (tmp_path / "v.html").read_text()
    assert "4 samples of 1 route in 1 shard, 0 frames skipped" in page
    assert "2 samples shown" in page
