"""Input that is not what `pack` expects, recognised for what it is (issue 43): one route folder
given as INPUT_DIR, data of another layout, and a layout YAML naming a key the files lack."""
from __future__ import annotations

from pathlib import Path

from .test_routes import EP


def test_one_route_folder_is_recognised(raw_tcp, tmp_path, cli):
    """INPUT_DIR that is itself a route would be the route '.', whose dot once made the error
    suggest --dot-replacement (keys ___0000, the route's name lost)."""
    result = cli("pack", raw_tcp / EP, tmp_path / "out", "--layout", "tcp")
    assert result.exit_code != 0
    assert f"is one route ({Path(EP).name})" in result.output
    assert f"pass its parent folder ({(raw_tcp / EP).parent.resolve()})" in result.output
    assert "dot" not in result.output and not (tmp_path / "out").exists()


def test_data_of_another_layout_names_what_it_holds_and_the_matching_layouts(synth, tmp_path,
                                                                             cli):
    """The default --layout tcp on garage data: the route folders' subfolders, and the layouts
    of the registry whose files match, where it once said 'all 0 frames ... no frames found'."""
    raw = synth(tmp_path / "garage", "garage", episodes=1, frames=12)
    result = cli("pack", raw, tmp_path / "out")
    assert result.exit_code != 0
    out = " ".join(result.output.split())
    assert "no frames found" not in out
    assert "holds a measurements/NNNN.json file, which layout tcp reads" in out
    assert "measurements/ (12 .json.gz)" in out and "rgb/ (12 .jpg)" in out
    assert "Fix: pack with --layout garage (layouts whose files match: garage," in out


def test_layout_of_another_dataset_suggests_the_one_that_matches(raw_tcp, tmp_path, cli):
    result = cli("pack", raw_tcp, tmp_path / "out", "--layout", "garage")
    out = " ".join(result.output.split())
    assert result.exit_code != 0 and "which layout garage reads" in out
    assert "measurements/ (30 .json), rgb/ (30 .png)" in out
    assert "Fix: pack with --layout tcp" in out


def test_wrong_yaml_key_names_the_yaml_line_and_the_json_keys(raw_tcp, tmp_path, cli):
    """target_x: x_targ in a layout YAML is the YAML's fault, not each frame's: the error names
    the YAML's key and the keys the measurement files have, not --on-error skip."""
    shipped = Path(__file__).parents[2] / "carla_wds/pack/datasets/routes/layouts/tcp.yaml"
    layout = tmp_path / "mine.yaml"
    layout.write_text(shipped.read_text().replace("target_x: x_target", "target_x: x_targ"))
    for mode in ("fail", "skip"):
        result = cli("pack", raw_tcp, tmp_path / mode, "--layout", layout, "--on-error", mode)
        out = " ".join(result.output.split())
        assert result.exit_code != 0, out
        assert "(the layout's fields.target_x: x_targ) (did you mean 'x_target'?)" in out
        assert "the file has keys [" in out and "x_target" in out and "y_target" in out
        assert "Fix: correct fields.target_x in the layout YAML" in out
        assert "--on-error skip" not in out


def test_no_route_folders_suggest_the_dataset_whose_files_they_are(synth, tmp_path, cli):
    """Data of a code dataset (clips with anno/, LEAD's routes with metas/ and bboxes/) under
    the default --layout tcp: the dataset whose files they are, from the registry."""
    for layout in ("bench2drive", "lead"):
        raw = synth(tmp_path / layout, layout, episodes=1, frames=12)
        out = " ".join(cli("pack", raw, tmp_path / f"out_{layout}").output.split())
        assert "no route folders found" in out or "archives holds a route folder" in out
        assert f"Fix: pack with --layout {layout}" in out
    (tmp_path / "empty" / "x").mkdir(parents=True)
    out = " ".join(cli("pack", tmp_path / "empty", tmp_path / "out").output.split())
    assert "Fix: point INPUT_DIR at the dataset root or choose the right --layout" in out
