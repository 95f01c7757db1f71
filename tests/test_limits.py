"""limits.py: one table of bounds, NAME=VALUE overrides with errors listing the names, and
the --limit option of the commands that read untrusted files."""
from __future__ import annotations

import pickle

import pytest
from click.testing import CliRunner

from carla_wds import limits
from carla_wds.cli import main
from carla_wds.pack.datasets.routes.layouts import LAYOUT_DIR


def test_overrides_parse_numbers_and_refuse_unknown_names_and_bad_values():
    got = limits.DEFAULT.with_overrides(["lidar_points=8e6", "clip_bytes=2**31", "json_depth=7"])
    assert (got.lidar_points, got.clip_bytes, got.json_depth) == (8_000_000, 2 ** 31, 7)
    assert limits.DEFAULT.lidar_points == 4_000_000   # the defaults are untouched
    with pytest.raises(ValueError, match="valid: image_pixels, lidar_points"):
        limits.DEFAULT.with_overrides(["lidar_pts=1"])
    for bad in ("lidar_points=-1", "lidar_points=0", "lidar_points=1.5", "lidar_points=x",
                "lidar_points=inf", "lidar_points=nan"):
        with pytest.raises(ValueError, match="whole number > 0"):
            limits.DEFAULT.with_overrides([bad])
    with pytest.raises(ValueError, match="NAME=VALUE"):
        limits.DEFAULT.with_overrides(["lidar_points"])


def test_a_limit_error_names_the_limit_and_the_option_and_survives_a_pipe():
    with pytest.raises(limits.LimitError) as exc:
        limits.DEFAULT.check("lidar_points", 2 ** 28, "x.laz: the header's point count")
    msg = str(exc.value)
    assert "268,435,456" in msg and "lidar_points=4,000,000" in msg
    assert "--limit lidar_points=N" in msg
    back = pickle.loads(pickle.dumps(exc.value))
    assert str(back) == msg and back.name == "lidar_points" and isinstance(back, ValueError)


def test_using_restores_the_previous_limits():
    tight = limits.DEFAULT.with_overrides({"yaml_bytes": 10})
    with limits.using(tight):
        assert limits.active() is tight
    assert limits.active() == limits.DEFAULT


def test_the_cli_option_sets_the_limit_for_the_command(tmp_path):
    """--limit reaches the command's readers: a layout YAML over yaml_bytes is refused naming
    the limit; without the option the same pack gets past the layout."""
    layout = tmp_path / "mine.yaml"
    layout.write_text((LAYOUT_DIR / "tcp.yaml").read_text())
    runner = CliRunner()
    try:
        args = ["pack", str(tmp_path / "none"), str(tmp_path / "out"), "--layout", str(layout)]
        tight = runner.invoke(main, args + ["--limit", "yaml_bytes=64"])
        assert tight.exit_code != 0 and "yaml_bytes=64" in tight.output, tight.output
        loose = runner.invoke(main, args)
        assert "yaml_bytes" not in loose.output, loose.output
        bad = runner.invoke(main, args + ["--limit", "yaml_byte=64"])
        assert bad.exit_code == 2 and "valid: image_pixels" in bad.output
        assert not (tmp_path / "out").exists()
    finally:
        limits.set_active(limits.DEFAULT)


def test_a_pack_records_the_limits_it_raised(tmp_path):
    """The manifest says which limits differ from the defaults (None when none do), so a
    reader of a pack made with --limit knows to raise the same ones."""
    from carla_wds.pack import PackOptions, pack
    from carla_wds.pack.synth import synth_dataset
    synth_dataset(tmp_path / "raw", "tcp", episodes=1, frames=8, seed=0, image_size=(48, 64),
                  progress=False)
    plain = pack(tmp_path / "raw", tmp_path / "a", PackOptions(progress=False))
    assert plain["limits"] is None
    with limits.using(limits.DEFAULT.with_overrides({"json_depth": 50})):
        raised = pack(tmp_path / "raw", tmp_path / "b", PackOptions(progress=False))
    assert raised["limits"] == {"json_depth": 50}
