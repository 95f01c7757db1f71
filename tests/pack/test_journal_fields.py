"""A pack journal edited or damaged between a kill and its --resume (issue 38, low 3): every
field is checked on read, and the counts against each other, so a bad one is one line naming
the journal, never a traceback or an AssertionError that calls itself a carla-wds bug."""
from __future__ import annotations

import errno
import json
import os

import pytest

JOURNAL = ".pack-journal.jsonl"
ARGS = ("--max-samples", "7")


@pytest.fixture(scope="module")
def interrupted(raw_tcp, tmp_path_factory):
    """A pack whose 4th shard's rename failed: a journal of 3 committed shards (read-only)."""
    from click.testing import CliRunner

    from carla_wds.cli import main
    out, real, seen = tmp_path_factory.mktemp("journal") / "out", os.replace, [0]

    def replace(src, dst, *a, **kw):
        if str(dst).endswith(".tar"):
            seen[0] += 1
            if seen[0] == 4:
                raise OSError(errno.EIO, "Input/output error (injected)")
        return real(src, dst, *a, **kw)
    mp = pytest.MonkeyPatch()
    mp.setattr(os, "replace", replace)
    try:
        result = CliRunner().invoke(main, ["pack", str(raw_tcp), str(out), *ARGS])
    finally:
        mp.undo()
    assert result.exit_code != 0 and len((out / JOURNAL).read_text().splitlines()) == 4
    return out


def _edit(line: dict, field: str, value) -> None:
    doc = line["shard"] if field.startswith("shard.") else line
    doc[field.removeprefix("shard.")] = value


@pytest.mark.parametrize("field, value, says", [
    ("shard.samples", 10 ** 9, "says shard shard-000001.tar holds 1000000000 samples and 0 "
                               "skipped frames, but its tasks grow from 7 to 14"),
    ("tasks", 10 ** 9, "says shard shard-000001.tar holds 7 samples and 0 skipped frames, but "
                       "its tasks grow from 7 to 1000000000"),
    ("shard.samples", "7", "line 3 of {journal} is not a shard entry this carla-wds writes "
                           "(shard.samples is '7', not of type int"),
    ("shard.bytes", -1, "(shard.bytes is -1, below 0"),
    ("tasks", True, "(tasks is 'True', not of type int"),
    ("skipped", [5], "(skipped holds '5', not a skipped frame"),
    ("meta", {"image_sizes": {"front": "x"}}, "(meta.image_sizes holds 'x', not an image size"),
    ("shard.steps", None, "(shard.steps is 'None', not of type dict"),
])
def test_resume_refuses_a_bad_journal_field_in_one_line(interrupted, raw_tcp, copy_tree, cli,
                                                        field, value, says):
    out = copy_tree(interrupted, "out")
    journal = out / JOURNAL
    lines = journal.read_text().splitlines()
    line = json.loads(lines[2])
    _edit(line, field, value)
    lines[2] = json.dumps(line)
    journal.write_text("\n".join(lines) + "\n")
    result = cli("pack", raw_tcp, out, *ARGS, "--resume")
    assert result.exit_code == 1, result.output
    [error] = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert says.format(journal=journal) in error and str(journal) in error, error
    assert error.endswith("Fix: pack again with --overwrite") and "bug" not in error
    assert not (out / "manifest.json").exists()


def test_an_untouched_journal_resumes(interrupted, raw_tcp, copy_tree, cli):
    out = copy_tree(interrupted, "out")
    assert cli("pack", raw_tcp, out, *ARGS, "--resume").exit_code == 0
