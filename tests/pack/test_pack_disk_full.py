"""A temporary disk that fills up while a clip archive is unpacked is the machine's error, not
the archive's: `carla-wds pack` names the folder, its free space and the options that move it
(TMPDIR, --spool-bytes), and fails in --on-error skip as in fail mode, so no intact clip is
dropped. The disk fills for real: a 256 kB tmpfs in a private mount namespace (unshare), and,
where that is not allowed, a file-size limit (RLIMIT_FSIZE: EFBIG) in the pack's process."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from carla_wds.pack.synth import synth_dataset

EXE = str(Path(sys.executable).parent / "carla-wds")
SMALL = 256 << 10


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b2d_full")
    synth_dataset(out, "bench2drive", episodes=2, frames=30, seed=13, image_size=(54, 96),
                  progress=False)
    return out / "archives"


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pack_cmd(archives: Path, out: Path, on_error: str) -> list[str]:
    return [EXE, "pack", str(archives), str(out), "--layout", "bench2drive", "--on-error",
            on_error, "--spool-bytes", "1"]


def check_refused(proc: subprocess.CompletedProcess, out: Path, tmp: Path, cause: str) -> None:
    err = proc.stderr
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert cause in line and str(tmp) in line and "TMPDIR" in line and "--spool-bytes" in line
    assert "bytes free" in line and "not found bad" in line
    assert "re-download" not in line   # not blamed on the archive
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_a_full_tmpfs_names_the_folder_not_the_archive(archives, tmp_path, on_error):
    if not _can_unshare():
        pytest.skip("no unprivileged mount namespace here (unshare -rm); see the rlimit test")
    tmp = tmp_path / "tiny"
    tmp.mkdir()
    out = tmp_path / "out"
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(SMALL), str(tmp),
                           *pack_cmd(archives, out, on_error)],
                          env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True,
                          text=True, timeout=300)
    check_refused(proc, out, tmp, "No space left on device")


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit: EFBIG, no signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (SMALL, SMALL))


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_a_file_size_limit_on_the_spool_names_the_folder(archives, tmp_path, on_error):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    proc = subprocess.run(pack_cmd(archives, out, on_error), preexec_fn=_limit_file_size,
                          env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True,
                          text=True, timeout=300)
    check_refused(proc, out, tmp, "File too large")


MEMORY_CHILD = """
import io, gzip, resource, sys, tarfile
from pathlib import Path
from carla_wds import limits
from carla_wds.pack.datasets.bench2drive.clips import ArchiveClip, ClipRef
# zeros compress 1000x: clip_ratio would refuse them first, and this is about memory
limits.set_active(limits.DEFAULT.with_overrides({"clip_ratio": 10 ** 6}))
path = Path(sys.argv[1])
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tar:   # 192 MiB of zeros in 12 members
    for i in range(12):
        info = tarfile.TarInfo(f"C/m/{i}")
        info.size = 16 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
path.write_bytes(gzip.compress(buf.getvalue(), 1))
del buf
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * resource.getpagesize()
# 96 MiB more address space than now: the spool (in memory up to --spool-bytes) cannot grow
resource.setrlimit(resource.RLIMIT_AS, (mapped + (96 << 20), resource.RLIM_INFINITY))
ArchiveClip(ClipRef("C", path, True)).close()
"""


def test_out_of_memory_while_spooling_is_the_machine_not_the_archive(tmp_path):
    proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(tmp_path / "C.tar.gz")],
                          capture_output=True, text=True, timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("carla_wds.pack.errors.ResourceError: clip "), proc.stderr[-2000:]
    assert "out of memory" in last and "--spool-bytes" in last and "not found bad" in last
