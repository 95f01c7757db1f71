"""The default sample set of every layout is its project's own loader's, and --all-frames gives
every frame with a full future (the sample set before issue 24).

Each expected set is the project's loop, transcribed here independently of carla_wds:
- tcp, tcp_roach: OpenDriveLab/TCP@73cc1dd tools/gen_data.py gen_single_route:
  `for i in range(INPUT_FRAMES-1, length-FUTURE_FRAMES)`, INPUT_FRAMES = 1, FUTURE_FRAMES = 4.
- transfuser4: autonomousvision/transfuser@cvpr2021 9a90951 transfuser/data.py:
  `num_seq = (len(rgb_front) - pred_len - 2)//seq_len`, frame `seq*seq_len + 1 + i`,
  seq_len = 1, pred_len = 4 (config.py).
- transfuser2022: autonomousvision/transfuser@2022 22b3ccd team_code_transfuser/data.py l.57:
  `range(2, num_seq - self.pred_len - self.seq_len - 2)`, seq_len = 1, pred_len = 4.
- garage: autonomousvision/carla_garage@1448bed team_code/data.py l.99:
  `range(config.skip_first, num_seq - pred_len - seq_len)`; config.py l.111-118: carla_fps =
  20, data_save_freq = 5, skip_first = int(2.5 * carla_fps) // data_save_freq,
  pred_len = int(2.0 * carla_fps) // data_save_freq, seq_len = 1.
- bench2drive: Thinklab-SJTU/Bench2DriveZoo@tcp/admlp 31278ff tools/gen_tcp_data.py:
  `length = len(anno) - 1`, `range(INPUT_FRAMES-1, length-FUTURE_FRAMES-5)`, FUTURE_FRAMES =
  4*5, at 10 Hz; carla-wds keeps its 2 Hz keyframes (frame % 5 == 0) of that range.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from carla_wds.manifest_schema import ManifestError, sample_rule, validate_manifest
from carla_wds.pack.synth import synth_dataset
from tests.conftest import read_pack, run_pack

N = 26              # frames per route
N_B2D = 42          # 10 Hz frames per bench2drive clip: the port serves 0 .. 15
EPISODES = 2
PICKLED = {"tcp_roach", "transfuser2022"}   # raw inputs only these projects pickle


def tcp_frames(n: int) -> list[int]:
    input_frames, future_frames = 1, 4
    return list(range(input_frames - 1, n - future_frames))


def tf2021_frames(n: int) -> list[int]:
    seq_len, pred_len = 1, 4
    num_seq = (n - pred_len - 2) // seq_len
    return [seq * seq_len + 1 + 0 for seq in range(num_seq)]


def tf2022_frames(n: int) -> list[int]:
    seq_len, pred_len = 1, 4
    return list(range(2, n - pred_len - seq_len - 2))


def garage_frames(n: int) -> list[int]:
    carla_fps, data_save_freq, seq_len = 20, 5, 1
    skip_first = int(2.5 * carla_fps) // data_save_freq
    pred_len = int(2.0 * carla_fps) // data_save_freq
    return list(range(skip_first, n - pred_len - seq_len))


def b2d_port_frames(n: int) -> list[int]:
    input_frames, future_frames = 1, 4 * 5
    length = n - 1   # "drop last frame"
    return [i for i in range(input_frames - 1, length - future_frames - 5) if i % 5 == 0]


def full_future(n: int, pred_len: int, step: int = 1, stride: int = 1) -> list[int]:
    """Every frame with a full future: the sample set before the loader rule."""
    return [t for t in range(n) if t % stride == 0 and t + pred_len * step <= n - 1]


LOADERS = {"tcp": tcp_frames, "tcp_roach": tcp_frames, "transfuser4": tf2021_frames,
           "transfuser2022": tf2022_frames, "garage": garage_frames}
PRED_LEN = {"tcp": 4, "tcp_roach": 4, "transfuser4": 4, "transfuser2022": 4, "garage": 8}


@pytest.fixture(scope="module")
def raws(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for layout in [*LOADERS, "bench2drive"]:
        out[layout] = tmp_path_factory.mktemp(f"raw_{layout}")
        synth_dataset(out[layout], layout, episodes=EPISODES,
                      frames=N_B2D if layout == "bench2drive" else N, seed=7,
                      image_size=(32, 48) if layout != "bench2drive" else (36, 64),
                      progress=False)
    return out


def packed_frames(pack_dir: Path) -> dict[str, list[int]]:
    """Per route, the frames of the samples in the pack (from their keys, ...__NNNN)."""
    frames: dict[str, list[int]] = {}
    for key in read_pack(pack_dir):
        route, _, t = key.rpartition("__")
        frames.setdefault(route, []).append(int(t))
    return {r: sorted(ts) for r, ts in frames.items()}


def pack_layout(raw: Path, out: Path, layout: str, **kw) -> dict:
    if layout == "bench2drive":
        return run_pack(raw / "v1", out, layout=layout, sensors=(), **kw)
    return run_pack(raw, out, layout=layout, allow_pickle_input=layout in PICKLED, **kw)


@pytest.mark.parametrize("layout", sorted(LOADERS))
def test_route_layouts_serve_their_loaders_frames(raws, tmp_path, layout):
    manifest = pack_layout(raws[layout], tmp_path / "p", layout)
    got = packed_frames(tmp_path / "p")
    want = LOADERS[layout](N)
    routes = EPISODES - manifest["counts"]["filtered_routes"]
    assert len(got) == routes and all(frames == want for frames in got.values()), (got, want)
    c = manifest["counts"]
    tail = PRED_LEN[layout]
    # frames before the first sample are the head; frames after the last, apart from the
    # pred_len without a full future, are the loader's tail
    assert c["head_frames"] == routes * want[0]
    assert c["tail_frames"] == routes * tail
    assert c["loader_tail_frames"] == routes * (N - 1 - want[-1] - tail)
    assert c["samples"] == routes * len(want)
    rule = manifest["sample_rule"]
    assert rule["all_frames"] is False and rule["head"] == want[0]
    assert rule["tail"] == N - 1 - want[-1] - tail and rule["loader"]


@pytest.mark.parametrize("layout", sorted(LOADERS))
def test_all_frames_keeps_every_frame_with_a_full_future(raws, tmp_path, layout):
    manifest = pack_layout(raws[layout], tmp_path / "p", layout, all_frames=True)
    got = packed_frames(tmp_path / "p")
    want = full_future(N, PRED_LEN[layout])
    assert got and all(frames == want for frames in got.values()), (got, want)
    c = manifest["counts"]
    assert c["head_frames"] == c["loader_tail_frames"] == 0
    assert manifest["sample_rule"]["all_frames"] is True
    assert manifest["pack_args"]["all_frames"] is True


def test_bench2drive_serves_the_tcp_ports_keyframes(raws, tmp_path):
    manifest = pack_layout(raws["bench2drive"], tmp_path / "p", "bench2drive")
    got = packed_frames(tmp_path / "p")
    want = b2d_port_frames(N_B2D)
    assert len(got) == EPISODES and all(f == want for f in got.values()), (got, want)
    old = full_future(N_B2D, 4, step=5, stride=5)
    c = manifest["counts"]
    assert c["loader_tail_frames"] == EPISODES * (len(old) - len(want)) > 0
    assert c["head_frames"] == 0
    assert c["tail_frames"] == EPISODES * (len(range(0, N_B2D, 5)) - len(old))
    assert manifest["sample_rule"] == {"all_frames": False, "head": 0, "tail": 6,
                                       "loader": manifest["sample_rule"]["loader"]}


def test_bench2drive_all_frames_keeps_every_keyframe_with_a_future(raws, tmp_path):
    manifest = pack_layout(raws["bench2drive"], tmp_path / "p", "bench2drive", all_frames=True)
    want = full_future(N_B2D, 4, step=5, stride=5)
    assert all(f == want for f in packed_frames(tmp_path / "p").values())
    assert manifest["counts"]["loader_tail_frames"] == 0


def test_all_frames_is_part_of_a_packs_identity(raws, tmp_path):
    """A resume must not mix the two sample sets: the journal's options differ."""
    from carla_wds.pack.options import PackOptions
    assert PackOptions(all_frames=True).identity() != PackOptions().identity()


def test_garage_route_shorter_than_the_rule_counts_every_frame(tmp_path):
    """12 frames: garage's range(10, 12 - 9) is empty; a second route of 26 frames gives the
    manifest. Every frame of the short route is counted under its reason."""
    synth_dataset(tmp_path / "raw", "garage", episodes=1, frames=12, seed=1,
                  image_size=(32, 48), progress=False)
    synth_dataset(tmp_path / "raw2", "garage", episodes=1, frames=N, seed=2,
                  image_size=(32, 48), progress=False)
    (short,) = [p for p in (tmp_path / "raw").rglob("measurements")]
    (long_,) = [p for p in (tmp_path / "raw2").rglob("measurements")]
    dest = tmp_path / "both" / "b"
    dest.mkdir(parents=True)
    short.parent.rename(dest / "short")
    long_.parent.rename(dest / "long")
    m = run_pack(tmp_path / "both", tmp_path / "p", layout="garage")
    c = m["counts"]
    assert c["frames"] == 12 + N
    assert c["samples"] == len(garage_frames(N)) and len(garage_frames(12)) == 0
    assert c["samples"] + c["tail_frames"] + c["head_frames"] + c["loader_tail_frames"] \
        + c["skipped"] == c["frames"]


def _old_manifest(doc: dict) -> dict:
    """The manifest as a pack before the loader rule wrote it."""
    old = {k: v for k, v in doc.items() if k != "sample_rule"}
    old["counts"] = {k: v for k, v in doc["counts"].items()
                     if k not in ("head_frames", "loader_tail_frames")}
    old["pack_args"] = {k: v for k, v in doc["pack_args"].items() if k != "all_frames"}
    return old


def test_old_manifest_without_the_rule_loads_as_every_frame(packed_tcp, tmp_path):
    from carla_wds.load import CARLAWebData
    doc = json.loads((packed_tcp / "manifest.json").read_text())
    old = _old_manifest(doc)
    validate_manifest(old, "old")
    # packs before the rule held every frame with a full future
    assert sample_rule(old) == {"all_frames": True, "head": 0, "tail": 0, "loader": ""}
    assert sample_rule(doc)["all_frames"] is False
    out = tmp_path / "old"
    out.mkdir()
    for shard in doc["shards"]:
        shutil.copyfile(packed_tcp / shard["name"], out / shard["name"])
    (out / "manifest.json").write_text(json.dumps(old))
    ds = CARLAWebData(str(out), batch_size=4, image_size=(32, 64), mode="eval")
    assert sum(int(b.valid.sum()) for b in ds) == doc["total_samples"]


@pytest.mark.parametrize("rule", [{"all_frames": "no", "head": 0, "tail": 0, "loader": ""},
                                  {"all_frames": False, "head": -1, "tail": 0, "loader": ""},
                                  {"all_frames": False, "head": 0, "tail": 1.5, "loader": ""},
                                  [1, 2]])
def test_a_bad_sample_rule_is_refused(packed_tcp, rule):
    doc = json.loads((packed_tcp / "manifest.json").read_text())
    with pytest.raises(ManifestError, match="sample_rule"):
        validate_manifest({**doc, "sample_rule": rule}, "m")
