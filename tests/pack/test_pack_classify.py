"""How a pack classifies what it could not use: --spool-bytes is checked for every layout; a
pack whose only clip is left out says why (never "Reasons: none"); a garage route whose
results.json.gz cannot be read stops a fail-mode pack naming the file, and is counted and
listed in skip mode (never dropped with exit 0)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from carla_wds.pack.errors import PackError
from carla_wds.pack.options import PackOptions
from carla_wds.pack.synth import synth_dataset
from carla_wds.pack.synth.bench2drive import clip_name
from tests.conftest import make_raw
# every frame with a full future: short garage routes hold none of garage's own range
from tests.conftest import run_pack_all_frames as run_pack


@pytest.mark.parametrize("layout", ["tcp", "transfuser4", "bench2drive"])
def test_a_negative_spool_bytes_is_refused_for_every_layout(layout):
    with pytest.raises(PackError, match=r"--spool-bytes -1: expected a whole number >= 0"):
        PackOptions(layout=layout, spool_bytes=-1).validate()


def test_a_negative_spool_bytes_through_the_cli(raw_tcp, tmp_path, cli):
    result = cli("pack", raw_tcp, tmp_path / "out", "--spool-bytes", "-1")
    assert result.exit_code == 1
    assert "--spool-bytes -1: expected a whole number >= 0" in result.output
    assert not (tmp_path / "out").exists()


def test_the_only_clip_left_out_gives_its_reason(tmp_path):
    synth_dataset(tmp_path / "raw", "bench2drive", episodes=1, frames=30, seed=17,
                  image_size=(54, 96), progress=False)
    bad = tmp_path / "raw" / "archives" / f"{clip_name(0)}.tar.gz"
    bad.write_bytes(bad.read_bytes()[:-20])
    with pytest.raises(PackError) as err:
        run_pack(bad.parent, tmp_path / "out", layout="bench2drive", on_error="skip")
    msg = str(err.value)
    assert "Reasons: none" not in msg
    assert f"route {clip_name(0)} left out" in msg and "truncated or corrupt archive" in msg


@pytest.fixture(scope="module")
def raw_garage(tmp_path_factory) -> Path:
    return make_raw(tmp_path_factory.mktemp("garage_results"), "garage", episodes=2,
                    frames=14, seed=7)


def bad_results(raw_garage: Path, tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "raw"
    shutil.copytree(raw_garage, src)
    results = sorted(src.rglob("results.json.gz"))
    assert len(results) == 2
    results[0].write_bytes(results[0].read_bytes()[:25])   # a gzip cut short
    return src, results[0]


def test_an_unreadable_results_file_stops_a_fail_mode_pack(raw_garage, tmp_path):
    src, bad = bad_results(raw_garage, tmp_path)
    with pytest.raises(PackError) as err:
        run_pack(src, tmp_path / "out", layout="garage")
    msg = str(err.value)
    route = str(bad.parent.relative_to(src))
    assert msg.startswith(f"{route} frame 0000: results.json.gz: unreadable")
    assert "--on-error skip" in msg
    assert not (tmp_path / "out").exists()


def test_an_unreadable_results_file_is_counted_in_skip_mode(raw_garage, tmp_path):
    src, bad = bad_results(raw_garage, tmp_path)
    m = run_pack(src, tmp_path / "out", layout="garage", on_error="skip")
    route = str(bad.parent.relative_to(src))
    listed = [s for s in m["skipped"] if s["episode"] == route]
    assert len(listed) == 14 == m["counts"]["skipped"]
    assert all(s["file"] == "results.json.gz" and "unreadable" in s["reason"] for s in listed)
    assert not m["filtered_routes"]
