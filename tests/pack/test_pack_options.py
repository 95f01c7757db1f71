"""`carla-wds pack` refuses bad options and bad layout files with a one-line error naming the
option or file, what was expected and the fix, and a refused pack leaves OUTPUT_DIR as it found
it (absent stays absent, empty stays empty), so the corrected command just runs."""
from __future__ import annotations

from pathlib import Path

import pytest

BAD_OPTIONS = {
    "max_bytes_negative": (["--max-bytes", "-5"], "--max-bytes -5"),
    "max_bytes_zero": (["--max-bytes", "0"], "--max-bytes 0"),
    "quality_high": (["--quality", "1000"], "--quality 1000"),
    "quality_zero": (["--quality", "0"], "--quality 0"),
    "resize_zero": (["--resize", "0x0"], "--resize 0x0"),
    "resize_negative": (["--resize", "24x-3"], "--resize 24x-3"),
    "prefix_dotdot": (["--prefix", "../x"], "--prefix '../x'"),
    "prefix_slash": (["--prefix", "a/b"], "--prefix 'a/b'"),
    "prefix_hidden": (["--prefix", ".x"], "--prefix '.x'"),
    "prefix_empty": (["--prefix", ""], "--prefix ''"),
    "max_samples_zero": (["--max-samples", "0"], "--max-samples 0"),
    "pred_len_zero": (["--pred-len", "0"], "--pred-len 0"),
    "workers_zero": (["--workers", "0"], "--workers 0"),
    "part_out_of_range": (["--part", "3/2"], "--part 3/2"),
    "dot_replacement_dot": (["--dot-replacement", "."], "--dot-replacement '.'"),
    "resume_and_overwrite": (["--resume", "--overwrite"], "--resume with --overwrite"),
}


def _one_line_error(output: str) -> str:
    """The error click printed, which must be the last thing out and fit on one line (a
    progress bar or skip warnings may come before it)."""
    assert "Error: " in output and "Traceback" not in output, output
    error = output[output.index("Error: "):].rstrip("\n")
    assert "\n" not in error, output
    return error


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_is_refused_before_output_is_touched(case, raw_tcp, tmp_path, cli):
    args, named = BAD_OPTIONS[case]
    absent, empty = tmp_path / "absent", tmp_path / "empty"
    empty.mkdir()
    for out in (absent, empty):
        result = cli("pack", raw_tcp, out, *args)
        assert result.exit_code != 0
        line = _one_line_error(result.output)
        assert named in line and "expected" in line and "Fix:" in line, line
    assert not absent.exists()
    assert list(empty.iterdir()) == []
    # The corrected command then runs in the same folder.
    assert cli("pack", raw_tcp, empty, "--max-samples", "7").exit_code == 0


@pytest.mark.parametrize("resize", ["axb", "24x"])
def test_resize_that_is_no_pair_is_refused(resize, raw_tcp, tmp_path, cli):
    result = cli("pack", raw_tcp, tmp_path / "out", "--resize", resize)
    assert result.exit_code != 0 and "HxW" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_input_error_after_output_was_prepared_leaves_nothing(raw_tcp, copy_raw, tmp_path, cli):
    """A bad measurement in the first route stops a fail-mode pack before any shard is
    committed: no journal, no folder it made, so the rerun after the fix needs no --overwrite."""
    raw = copy_raw(raw_tcp)
    first = sorted(raw.rglob("measurements"))[0] / "0002.json"
    good = first.read_text()
    first.write_text("{")
    absent, empty = tmp_path / "absent", tmp_path / "empty"
    empty.mkdir()
    for out in (absent, empty):
        result = cli("pack", raw, out)
        assert result.exit_code != 0 and "0002.json" in result.output
    assert not absent.exists() and list(empty.iterdir()) == []
    first.write_text(good)
    assert cli("pack", raw, empty, "--max-samples", "7").exit_code == 0


def test_every_frame_skipped_is_an_error_with_no_output(raw_tcp, copy_raw, tmp_path, cli):
    """--on-error skip where every frame is bad: no manifest of 0 samples (it would load as a
    valid, empty dataset), a non-zero exit that says why, and nothing left behind."""
    raw = copy_raw(raw_tcp)
    for png in raw.rglob("*.png"):
        png.write_bytes(b"GIF89a" + bytes(64))
    out = tmp_path / "out"
    result = cli("pack", raw, out, "--on-error", "skip")
    assert result.exit_code != 0
    line = _one_line_error(result.output)
    assert "no samples" in line and "78 x not a PNG" in line and "no manifest" in line, line
    assert "Fix: repair" in line and "--on-error skip" not in line, line
    assert not out.exists()


# ---------------------------------------------------------------- layout files

LAYOUT_FILES = {
    "malformed": ("cameras: {front: rgb\nfields: [", "not valid YAML"),
    "tab_indent": ("cameras:\n\tfront: rgb\n", "not valid YAML"),
    "scalar": ("just a string", "holds a str, expected a mapping"),
    "list_top": ("- front\n- rgb\n", "holds a list, expected a mapping"),
    "cameras_list": ("cameras: [rgb]\nfields: {}\n", "cameras is a list; expected a mapping"),
    "fields_list": ("cameras: {front: rgb}\nfields: [x, y]\n", "fields is a list"),
    "nested_value": ("cameras: {front: {dir: rgb}}\n", "expected names to names"),
    "ext_not_string": ("cameras: {front: rgb}\nfields: {x: x, y: y, theta: theta, speed: speed, "
                       "target_x: a, target_y: b, command: c}\nimage_ext: [png]\n",
                       "image_ext is ['png']; expected a plain string"),
}


@pytest.mark.parametrize("case", sorted(LAYOUT_FILES))
def test_bad_layout_file_is_a_one_line_error(case, raw_tcp, tmp_path, cli):
    text, expected = LAYOUT_FILES[case]
    layout = tmp_path / "bad_layout.yaml"
    layout.write_text(text)
    out = tmp_path / "out"
    result = cli("pack", raw_tcp, out, "--layout", layout)
    assert result.exit_code != 0
    line = _one_line_error(result.output)
    assert str(layout) in line and expected in line and "Fix:" in line, line
    assert not out.exists()


def test_layout_value_errors_name_the_file(tmp_path):
    from carla_wds.pack.datasets.routes.layouts import load_layout
    path = tmp_path / "x.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="x.yaml: not a text file"):
        load_layout(Path(path))


def test_a_refused_pack_never_removes_a_journal_it_did_not_write(raw_tcp, tmp_path, cli):
    """A folder holding another pack's journal (of no shard yet) is refused as not empty,
    and that journal stays: it may belong to a pack that is still running."""
    out = tmp_path / "out"
    out.mkdir()
    journal = out / ".pack-journal.jsonl"
    journal.write_text('{"options": {}}\n')
    result = cli("pack", raw_tcp, out)
    assert result.exit_code != 0 and "not empty" in result.output
    assert journal.read_text() == '{"options": {}}\n'


@pytest.mark.parametrize("field, value, named", [("read_timeout", 0, "--read-timeout 0"),
                                                 ("retries", -1, "--retries -1")])
def test_bad_store_options_are_refused_by_the_library(field, value, named, raw_tcp, tmp_path):
    from carla_wds.pack.errors import PackError
    from carla_wds.pack.packer import PackOptions, pack
    with pytest.raises(PackError, match=f"{named}.*expected.*Fix:"):
        pack(raw_tcp, tmp_path / "out", PackOptions(progress=False, **{field: value}))
    assert not (tmp_path / "out").exists()
