"""Shared fixtures: small synthetic raw datasets (both layouts) and packs of them.

Everything is made with the project's own generator (`carla_wds.pack.synth.synth_dataset`) into real
folders; nothing is mocked. Session fixtures are read-only for tests: a test that corrupts raw
files copies them first with `copy_raw`, and a test that changes a pack copies it with
`copy_tree`.

Fixtures for other test modules (loader, trainer):
- `raw_tcp`, `raw_tf4`: raw route folders (RAW_EPISODES routes x RAW_FRAMES frames, IMAGE_SIZE).
- `packed_tcp`, `packed_tf4`: folders written by `carla-wds pack` with PACKED_MAX_SAMPLES
  samples per shard, so there are several shards of uneven size (78 samples: 11 shards of 7,
  then one of 1); `manifest.json` is inside.
- `zoo(layout="tcp", episodes=3, frames=30, max_samples=7, **PackOptions)`: the shared pack
  zoo, one read-only pack per arguments per session (tests/helpers.PackZoo); a module that only
  reads a pack asks it instead of packing its own. Its files are checked unchanged at the end.
- `bench_runs`: each benchmark command's one run per session (tests/benchruns.py).
- `copy_raw(src)`, `copy_tree(src, name)`: a private copy under the test's tmp_path.
- `packer(in, out, **PackOptions)`, `synth(out, layout, ...)`, `samples_of(pack_dir)` (plain
  tarfile reader), `cli(*args)` (the click CLI in process; returns click's Result).
"""
from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Callable, Iterator

import pytest
from click.testing import CliRunner, Result

from carla_wds.cli import main as cli_main
from carla_wds.pack.packer import PackOptions, pack
from carla_wds.pack.synth import synth_dataset

from .benchruns import BenchRuns
from .helpers import PackZoo

# cost markers (proc, ddp, s3, docs, bench, browser), given by rule; `make quick` skips them;
# under -n, the serial group and the unit of work (tests/parallel.py)
pytest_plugins = ["tests.markers", "tests.parallel", "pytester"]

IMAGE_SIZE = (48, 64)          # (height, width); small so the whole suite stays fast
RAW_EPISODES = 3
RAW_FRAMES = 30
PACKED_MAX_SAMPLES = 7         # 3 x (30 - 4) = 78 samples -> 11 shards of 7 and one of 1
PRED_LEN = 4


def make_raw(out_dir: Path, layout: str, episodes: int = RAW_EPISODES, frames: int = RAW_FRAMES,
             seed: int = 0) -> Path:
    synth_dataset(out_dir, layout, episodes=episodes, frames=frames, seed=seed,
                  image_size=IMAGE_SIZE, progress=False)
    return out_dir


def run_pack(input_dir: Path, output_dir: Path, **options) -> dict:
    """carla_wds.pack.packer.pack with progress off; returns the manifest."""
    options.setdefault("progress", False)
    return pack(input_dir, output_dir, PackOptions.of(**options))


def run_pack_all_frames(input_dir: Path, output_dir: Path, **options) -> dict:
    """run_pack with --all-frames (every frame with a full future), for tests that follow
    frames to a route's ends; each layout's own sample set is tests/pack/test_sample_set.py's."""
    return run_pack(input_dir, output_dir, all_frames=True, **options)


def read_pack(pack_dir: Path) -> dict[str, dict[str, bytes]]:
    """All samples of a pack in manifest order, read with plain tarfile: key -> {member: bytes}."""
    manifest = json.loads((Path(pack_dir) / "manifest.json").read_text())
    samples: dict[str, dict[str, bytes]] = {}
    for shard in manifest["shards"]:
        with tarfile.open(Path(pack_dir) / shard["name"]) as tar:
            for member in tar:
                key, _, suffix = member.name.partition(".")
                samples.setdefault(key, {})[suffix] = tar.extractfile(member).read()
    return samples


@pytest.fixture(scope="session")
def raw_tcp(tmp_path_factory) -> Path:
    return make_raw(tmp_path_factory.mktemp("raw_tcp"), "tcp")


@pytest.fixture(scope="session")
def raw_tf4(tmp_path_factory) -> Path:
    return make_raw(tmp_path_factory.mktemp("raw_tf4"), "transfuser4")


@pytest.fixture(scope="session")
def packed_tcp(tmp_path_factory, raw_tcp) -> Path:
    out = tmp_path_factory.mktemp("packed_tcp") / "shards"
    run_pack(raw_tcp, out, layout="tcp", max_samples=PACKED_MAX_SAMPLES)
    return out


@pytest.fixture(scope="session")
def packed_tf4(tmp_path_factory, raw_tf4) -> Path:
    out = tmp_path_factory.mktemp("packed_tf4") / "shards"
    # every frame with a full future (--all-frames), as packed_tcp: 78 samples for the loader
    # tests; the default sample set (TransFuser 2021's) is tests/pack/test_sample_set.py's
    run_pack(raw_tf4, out, layout="transfuser4", max_samples=PACKED_MAX_SAMPLES, all_frames=True)
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Under `-n N` (N > 1) each worker computes on one torch thread: the workers already
    share the cores, and torch's default of one OpenMP thread per core in every worker made
    them spin against each other (tests/train/test_model.py: 31 s of CPU on 2 threads, 8 s
    on 1). A test whose result depends on the thread count (a golden recorded on 2) says so
    with @pytest.mark.torch_threads(2)."""
    config.addinivalue_line("markers", "torch_threads(n): run this test on n torch threads")
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers > 1:
        import torch
        torch.set_num_threads(1)


def _keep_torch_threads() -> Iterator[None]:
    """Give torch's thread count back after a test or module that sets it (some train tests
    set 1, in the body or in a module fixture): under -n a later module in the same worker
    would inherit it, and a result such as the b2d_tcp stitch's bilinear resize differs in
    its last bit between 1 and 2 threads."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


# autouse fixtures come first in their scope: the module's records the count before any
# module fixture sets it
_torch_threads_module = pytest.fixture(scope="module", autouse=True)(_keep_torch_threads)


@pytest.fixture(autouse=True)
def _torch_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """The count given back after the test, and for its body the one its torch_threads
    marker names."""
    keep = _keep_torch_threads()
    next(keep)
    marker = request.node.get_closest_marker("torch_threads")
    if marker is not None:
        import torch
        torch.set_num_threads(marker.args[0])
    yield
    next(keep, None)


@pytest.fixture
def copy_tree(tmp_path) -> Callable[[Path, str], Path]:
    """copy_tree(src, name) -> a private copy of a folder under this test's tmp_path."""
    def copy(src: Path, name: str = "copy") -> Path:
        dst = tmp_path / name
        shutil.copytree(src, dst)
        return dst
    return copy


@pytest.fixture
def copy_raw(copy_tree) -> Callable[[Path, str], Path]:
    """copy_raw(raw_fixture, name="raw") -> a private copy of a raw dataset to corrupt."""
    return lambda src, name="raw": copy_tree(src, name)


@pytest.fixture(scope="session")
def cli() -> Callable[..., Result]:
    """cli("pack", IN, OUT, "--max-samples", "7") -> click Result of carla-wds, run in process."""
    runner = CliRunner()

    def invoke(*args: str | Path) -> Result:
        return runner.invoke(cli_main, [str(a) for a in args], catch_exceptions=False)
    return invoke


@pytest.fixture(scope="session")
def packer() -> Callable[..., dict]:
    """packer(input_dir, output_dir, **PackOptions fields) -> manifest (progress off)."""
    return run_pack


@pytest.fixture(scope="session")
def synth() -> Callable[..., Path]:
    """synth(out_dir, layout, episodes=3, frames=30, seed=0) -> out_dir with small images."""
    return make_raw


@pytest.fixture(scope="session")
def samples_of() -> Callable[[Path], dict[str, dict[str, bytes]]]:
    """samples_of(pack_dir) -> {key: {member: bytes}} in shard order, via plain tarfile."""
    return read_pack


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> Iterator[PackZoo]:
    """zoo(layout="tcp", episodes=3, frames=30, max_samples=7, **PackOptions) -> the suite's
    one read-only pack of those arguments (tests/helpers.make_pack's data), made on first use.
    A test that changes a pack copies it first (copy_tree); the zoo checks at the session's
    end that none of its packs changed."""
    packs = PackZoo(tmp_path_factory.mktemp("zoo"))
    yield packs
    changed = packs.changed()
    assert not changed, (f"a test changed the shared packs' files {changed[:5]}; copy a zoo "
                         "pack (copy_tree) before changing it")


@pytest.fixture(scope="session")
def bench_runs(tmp_path_factory) -> BenchRuns:
    """bench_runs.run("bench_b2d.py", [...]) -> the suite's one run of that command (a doc
    block and a test_bench_* test share it; tests/benchruns.py)."""
    return BenchRuns(tmp_path_factory.mktemp("bench_runs"))


@pytest.fixture(scope="session")
def s3_endpoint():
    """The URL of a real S3 server on 127.0.0.1 (moto's), with bucket s3server.BUCKET; tests
    keep apart by writing under s3server.fresh_prefix(). Skipped where the s3 extra and moto
    are not installed."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from .s3server import start
    server, url = start()
    yield url
    server.stop()
