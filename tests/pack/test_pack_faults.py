"""`carla-wds pack` under real faults, in real processes: a shard commit that fails, a full disk,
and what --resume does afterwards (it must not read or encode what committed shards hold)."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from ..helpers import manifest_of, shard_hashes

FAULT = Path(__file__).parents[1] / "scripts" / "pack_with_fault.py"
JOURNAL = ".pack-journal.jsonl"


def pack_with_fault(fault: str, amount: int, raw: Path, out: Path, *args: str
                    ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FAULT), fault, str(amount), "pack", str(raw),
                           str(out), *args], capture_output=True, text=True, timeout=300)


def journal_names(out: Path) -> list[str]:
    lines = (out / JOURNAL).read_text().splitlines()[1:]
    return [json.loads(line)["shard"]["name"] for line in lines]


def committed_image_files(raw: Path, out: Path, folders: tuple[str, ...] = ("rgb",)
                          ) -> list[Path]:
    """The raw images of every sample in the shards the journal lists."""
    files = []
    for name in journal_names(out):
        with tarfile.open(out / name) as tar:
            for member in tar:
                if member.name.endswith(".meta.json"):
                    meta = json.loads(tar.extractfile(member).read())
                    files += [raw / meta["episode"] / f / f"{meta['frame']:04d}.png"
                              for f in folders]
    return files


def first_meta(shard: Path) -> dict:
    with tarfile.open(shard) as tar:
        member = next(m for m in tar if m.name.endswith(".meta.json"))
        return json.loads(tar.extractfile(member).read())


def test_failed_commit_stops_later_shards_and_resume_is_identical(raw_tcp, packed_tcp, copy_raw,
                                                                  tmp_path, cli):
    """The 2nd shard's rename fails: no later shard may be renamed or journaled (the journal
    stays consecutive), the error names the shard and the OS error, and --resume gives the
    bytes of an uninterrupted pack."""
    raw, out = copy_raw(raw_tcp), tmp_path / "out"
    proc = pack_with_fault("replace", 2, raw, out, "--max-samples", "7")
    assert proc.returncode != 0
    assert "shard-000001.tar" in proc.stderr and "Input/output error (injected)" in proc.stderr
    assert "--resume" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert journal_names(out) == ["shard-000000.tar"]
    assert sorted(p.name for p in out.glob("*.tar")) == ["shard-000000.tar"]
    assert not list(out.glob(".*.tmp"))
    resumed = cli("pack", raw, out, "--max-samples", "7", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert shard_hashes(out) == shard_hashes(packed_tcp)
    assert manifest_of(out) == manifest_of(packed_tcp)
    assert cli("verify", out).exit_code == 0


def test_resume_reads_no_image_of_a_committed_shard(raw_tcp, packed_tcp, copy_raw, tmp_path, cli):
    """After 4 committed shards every image in them is destroyed: a resume that read (or
    re-encoded) them would fail. The first image after them is truncated too, so the resume
    must fail on exactly that file (it does read the rest); restored, the resume finishes
    with the uninterrupted pack's bytes and manifest."""
    raw, out = copy_raw(raw_tcp), tmp_path / "out"
    assert pack_with_fault("replace", 5, raw, out, "--max-samples", "7").returncode != 0
    assert len(journal_names(out)) == 4
    committed = committed_image_files(raw, out)
    assert len(committed) == 28
    for path in committed:
        path.write_bytes(b"destroyed")
    meta = first_meta(packed_tcp / "shard-000004.tar")   # the stream's next sample
    nxt = raw / meta["episode"] / "rgb" / f"{meta['frame']:04d}.png"
    assert nxt not in committed
    good = nxt.read_bytes()
    nxt.write_bytes(good[:200])
    failed = cli("pack", raw, out, "--max-samples", "7", "--resume")
    assert failed.exit_code != 0
    assert (f"{meta['episode']} frame {meta['frame']:04d}: rgb/{meta['frame']:04d}.png: "
            "truncated PNG") in failed.output, failed.output
    assert len(journal_names(out)) == 4
    nxt.write_bytes(good)
    resumed = cli("pack", raw, out, "--max-samples", "7", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert shard_hashes(out) == shard_hashes(packed_tcp)
    assert manifest_of(out) == manifest_of(packed_tcp)


def test_resume_keeps_frames_skipped_in_committed_shards(raw_tcp, copy_raw, tmp_path, cli):
    """--on-error skip: a bad image inside the committed part is not read again on resume, yet
    the manifest lists it as skipped, with exact counts, as an uninterrupted pack does; the
    image sizes recorded come from the journal."""
    raw = copy_raw(raw_tcp)
    bad = raw / "Town01" / "routes_town01_00" / "rgb" / "0003.png"
    bad.write_bytes(bad.read_bytes()[:100])
    args = ["--max-samples", "7", "--on-error", "skip", "--max-bytes", "60000"]
    reference = tmp_path / "reference"
    assert cli("pack", raw, reference, *args).exit_code == 0
    assert [s["frame"] for s in manifest_of(reference)["skipped"]] == [3]
    out = tmp_path / "out"
    assert pack_with_fault("replace", 4, raw, out, *args).returncode != 0
    assert len(journal_names(out)) == 3
    for path in committed_image_files(raw, out):
        path.write_bytes(b"destroyed")
    resumed = cli("pack", raw, out, *args, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert shard_hashes(out) == shard_hashes(reference)
    manifest = manifest_of(out)
    assert manifest == manifest_of(reference)
    assert manifest["counts"]["skipped"] == 1 and manifest["image_sizes"] == {"front": [48, 64]}


def test_full_disk_names_the_file_and_resume_finishes(raw_tf4, packed_tf4, copy_raw, tmp_path,
                                                      cli):
    raw, out = copy_raw(raw_tf4), tmp_path / "out"
    args = ["--layout", "transfuser4", "--max-samples", "7", "--all-frames"]   # as packed_tf4
    proc = pack_with_fault("enospc", 500_000, raw, out, *args)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert "No space left on device" in err and "[Errno 28]" in err, err
    assert f"{out}/.shard-0000" in err and ".tar.tmp" in err, err
    assert "free space" in err and "--resume" in err, err
    done = journal_names(out)
    assert done and not (out / "manifest.json").exists()
    assert not list(out.glob(".*.tmp"))
    resumed = cli("pack", raw, out, *args, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert shard_hashes(out) == shard_hashes(packed_tf4)
    assert manifest_of(out) == manifest_of(packed_tf4)


def test_resume_refuses_a_journal_with_a_gap(raw_tcp, copy_raw, tmp_path, cli):
    """A journal whose i-th entry is not shard i (as the old committer could leave) is refused
    with a clear message, not replayed by position."""
    raw, out = copy_raw(raw_tcp), tmp_path / "out"
    assert pack_with_fault("replace", 4, raw, out, "--max-samples", "7").returncode != 0
    journal = out / JOURNAL
    lines = journal.read_text().splitlines()
    entry = json.loads(lines[2])
    entry["shard"]["name"] = "shard-000002.tar"
    (out / "shard-000001.tar").rename(out / "shard-000002.tar")
    journal.write_text("\n".join([lines[0], lines[1], json.dumps(entry), lines[3]]) + "\n")
    result = cli("pack", raw, out, "--max-samples", "7", "--resume")
    assert result.exit_code != 0
    assert "entry 1" in result.output and "shard-000002.tar" in result.output
    assert "expected shard-000001.tar" in result.output and "--overwrite" in result.output
    assert not (out / "manifest.json").exists()


def test_journal_line_cut_by_a_kill_is_dropped_before_appending(raw_tcp, packed_tcp, copy_raw,
                                                                 tmp_path, cli):
    """A kill in the middle of a journal append leaves a cut last line. The resume redoes that
    shard and rewrites the journal without the cut line, so what it appends stays readable
    through a second interruption."""
    raw, out = copy_raw(raw_tcp), tmp_path / "out"
    assert pack_with_fault("replace", 3, raw, out, "--max-samples", "7").returncode != 0
    with open(out / JOURNAL, "a") as j:
        j.write('{"shard": {"name": "shard-0000')
    again = pack_with_fault("replace", 2, raw, out, "--max-samples", "7", "--resume")
    assert again.returncode != 0 and "shard-000003.tar" in again.stderr, again.stderr
    assert journal_names(out) == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    resumed = cli("pack", raw, out, "--max-samples", "7", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert shard_hashes(out) == shard_hashes(packed_tcp)
