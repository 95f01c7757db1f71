"""tools/bench_layouts.py's per-file reader (carla_garage's own decode work, per sample) and its
in-process checks and timings: the same-result check and the per-step and LiDAR codec decode
times. Imported by bench_layouts.py (also by its DataLoader workers); see its docstring.
"""
from __future__ import annotations

import gzip
import json
import tarfile
import time
from pathlib import Path

import numpy as np

FIELDS = ["depth", "semantics", "bev", "lidar", "boxes", "measurements"]
PRED_LEN = 8
GARAGE_DEPTH_SCALE = np.float32(50.0 / 255.0)
# the measurement fields of garage.yaml's record, as (name, dtype)
RECORD = (("aim_wp", np.float32), ("command", np.int32), ("next_command", np.int32),
          ("steer", np.float32), ("throttle", np.float32), ("brake", np.bool_),
          ("junction", np.bool_), ("vehicle_hazard", np.bool_), ("light_hazard", np.bool_),
          ("walker_hazard", np.bool_), ("stop_sign_hazard", np.bool_), ("speed", np.float32),
          ("target_speed", np.float32), ("theta", np.float32),
          ("augmentation_translation", np.float32), ("augmentation_rotation", np.float32))
BIG_CLOUD = 40_000


# --------------------------------------------------------------------------------------------
# (b) the per-file reader
# --------------------------------------------------------------------------------------------

def _json_gz(path: Path):
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


def _imread(path: Path, flags: int):
    import cv2
    img = cv2.imread(str(path), flags)
    if img is None:
        raise OSError(f"cv2 cannot read {path}")
    return img


class PerFileGarage:
    """carla_garage's per-sample file reads and decodes (team_code/data.py __getitem__), to
    the arrays CARLAWebData gives; a map-style torch Dataset (len, getitem)."""

    def __init__(self, raw: Path, frames: list[tuple[str, int]], image_size: tuple[int, int]):
        from carla_wds.pack.datasets.routes.layouts import load_layout
        self.raw, self.frames, self.size = raw, frames, tuple(image_size)
        # garage's config.converter, as its loader applies it (the layout declares the table)
        sem = next(s for s in load_layout("garage").sensors if s.name == "semantics")
        self.classes = np.asarray(sem.classes, np.uint8)

    def __len__(self) -> int:
        return len(self.frames)

    def _image(self, path: Path, flags: int, interpolation: int):
        import cv2
        img = _imread(path, flags)
        if img.shape[:2] != self.size:
            img = cv2.resize(img, self.size[::-1], interpolation=interpolation)
        return img

    def measurements(self, route: Path, frame: int) -> dict:
        """The current measurements and the waypoints from the next PRED_LEN frames'
        ego_matrix, as carla_garage's get_waypoints (full 3x3 rotation)."""
        meas = [_json_gz(route / "measurements" / f"{frame + i:04d}.json.gz")
                for i in range(PRED_LEN + 1)]
        cur = meas[0]
        origin = np.asarray(cur["ego_matrix"], np.float64)[:3]
        future = np.array([m["ego_matrix"] for m in meas[1:]], np.float64)[:, :3, 3]
        wp = ((future - origin[:, 3]) @ origin[:, :3])[:, :2].astype(np.float32)
        command = np.zeros(6, np.float32)
        command[(cur["command"] if cur["command"] > 0 else 4) - 1] = 1.0
        from carla_wds.pack.datasets.routes.garage_route import smooth_route
        record = {name: np.asarray(cur[name], dtype) for name, dtype in RECORD}
        record.update(route=smooth_route(cur["route"], cur))   # smooth_route=True, as garage
        return {"speed": np.float32(cur["speed"]),
                "target_point": np.asarray(cur["target_point"], np.float32),
                "command": command, "waypoints": wp,
                "waypoints_diff": np.diff(wp, axis=0, prepend=np.zeros((1, 2), np.float32)),
                "measurements": record}

    def lidar(self, route: Path, frame: int) -> np.ndarray:
        import laspy
        las = laspy.read(str(route / "lidar" / f"{frame:04d}.laz"))
        return np.ascontiguousarray(las.xyz, dtype=np.float32)

    def boxes(self, route: Path, frame: int) -> np.ndarray:
        from carla_wds.datasets.garage import garage_boxes
        return garage_boxes(_json_gz(route / "boxes" / f"{frame:04d}.json.gz"))

    def __getitem__(self, i: int) -> dict:
        import cv2
        episode, frame = self.frames[i]
        route, name = self.raw / episode, f"{frame:04d}"
        out = self.measurements(route, frame)
        rgb = self._image(route / "rgb" / f"{name}.jpg", cv2.IMREAD_COLOR, cv2.INTER_LINEAR)
        out["images"] = cv2.cvtColor(rgb, cv2.COLOR_BGR2RGB).transpose(2, 0, 1)[None]
        depth = self._image(route / "depth" / f"{name}.png", cv2.IMREAD_UNCHANGED,
                            cv2.INTER_LINEAR)
        out["depth"] = (depth.astype(np.float32) * GARAGE_DEPTH_SCALE)[None]
        out["semantics"] = self.classes[self._image(route / "semantics" / f"{name}.png",
                                                    cv2.IMREAD_UNCHANGED, cv2.INTER_NEAREST)][None]
        out["bev"] = _imread(route / "bev_semantics" / f"{name}.png", cv2.IMREAD_UNCHANGED)[None]
        out["lidar"] = self.lidar(route, frame)
        out["boxes"] = self.boxes(route, frame)
        out["key"] = f"{episode.replace('/', '__')}__{name}"
        return out


def collate(items: list[dict]) -> dict:
    """Stacked tensors; lidar and boxes zero-padded to the batch's longest, with _len."""
    import torch
    out: dict = {"keys": [it["key"] for it in items]}
    for name in ("images", "depth", "semantics", "bev", "speed", "target_point", "command",
                 "waypoints", "waypoints_diff"):
        out[name] = torch.from_numpy(np.stack([it[name] for it in items]))
    for name in ("lidar", "boxes"):
        lens = [len(it[name]) for it in items]
        pad = np.zeros((len(items), max(lens), items[0][name].shape[1]), np.float32)
        for row, it in zip(pad, items):
            row[:len(it[name])] = it[name]
        out[name], out[f"{name}_len"] = torch.from_numpy(pad), torch.tensor(lens)
    out["measurements"] = {k: torch.from_numpy(np.stack([it["measurements"][k] for it in items]))
                           for k in items[0]["measurements"]}
    return out


def _members(shards: Path, suffix: str) -> dict[str, bytes]:
    """key -> bytes of one member kind, from every shard of a pack."""
    manifest = json.loads((shards / "manifest.json").read_text())
    out = {}
    for name in [s["name"] for s in manifest["shards"]]:
        with tarfile.open(shards / name) as tar:
            for m in tar:
                if m.name.endswith(suffix):
                    out[m.name[:-len(suffix)]] = tar.extractfile(m).read()
    return out


# --------------------------------------------------------------------------------------------
# checks and in-process timings
# --------------------------------------------------------------------------------------------

def check_same(workdir: Path, batch: int) -> str:
    """One carla-wds batch against the per-file reader's items for the same keys."""
    from carla_wds import CARLAWebData
    info = json.loads((workdir / "frames.json").read_text())
    size = tuple(info["image_size"])
    by_key = {k: (ep, fr) for k, ep, fr in info["frames"]}
    data = CARLAWebData(str(workdir / "shards"), batch_size=batch, mode="eval",
                        image_size=size, fields=FIELDS)
    b = next(iter(data))
    keys = [k for k, v in zip(b.keys, b.valid.tolist()) if v]
    ds = PerFileGarage(workdir / "raw", [by_key[k] for k in keys], size)
    ref = collate([ds[i] for i in range(len(keys))])
    n = len(keys)
    pairs = {"images": (b.images[:n], ref["images"], 0), "depth": (b.depth[:n], ref["depth"], 0),
             "semantics": (b.semantics[:n], ref["semantics"], 0), "bev": (b.bev[:n], ref["bev"], 0),
             "waypoints": (b.waypoints[:n], ref["waypoints"], 1e-4),
             "target_point": (b.target_point[:n], ref["target_point"], 1e-5),
             "route": (b.route[:n], ref["measurements"]["route"], 1e-5),
             "speed": (b.speed[:n], ref["speed"], 1e-5)}
    for name in ("lidar", "boxes"):
        mine, theirs = getattr(b, name)[:n], ref[name]
        width = min(mine.shape[1], theirs.shape[1])
        pairs[name] = (mine[:, :width], theirs[:, :width], 0)
        pairs[f"{name}_len"] = (getattr(b, f"{name}_len")[:n], ref[f"{name}_len"], 0)
    bad = [name for name, (x, y, tol) in pairs.items()
           if x.shape != y.shape or not np.allclose(x.numpy().astype(np.float64),
                                                    y.numpy().astype(np.float64), atol=tol)]
    if ref["keys"] != keys or bad:
        raise SystemExit(f"the readers disagree on {bad or 'keys'} for keys {keys[:2]}...")
    return f"{n} samples, {len(pairs)} fields"


def _best_us(fn, items: list, repeats: int) -> float:
    """Median over repeats of the mean us per item of fn over all items (after one untimed
    pass: lazy imports, first-call set-up)."""
    for it in items[:2]:
        fn(it)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        times.append((time.perf_counter() - t0) / len(items) * 1e6)
    return sorted(times)[len(times) // 2]


def breakdown(workdir: Path, repeats: int, limit: int = 48) -> list[tuple[str, float, float]]:
    """Per-sample ms of each decode step, in this process: (step, per-file, carla-wds)."""
    import cv2

    from carla_wds.codecs import codec_named
    info = json.loads((workdir / "frames.json").read_text())
    size = tuple(info["image_size"])
    frames = info["frames"][:limit]
    ds = PerFileGarage(workdir / "raw", [(ep, fr) for _, ep, fr in frames], size)
    routes = [(workdir / "raw" / ep, fr) for _, ep, fr in frames]
    keys = [k for k, _, _ in frames]
    shards = workdir / "shards"
    manifest = json.loads((shards / "manifest.json").read_text())
    members = manifest["members"]
    rows = []
    steps = [
        ("rgb JPEG", "front.jpg",
         lambda r: ds._image(r[0] / "rgb" / f"{r[1]:04d}.jpg", cv2.IMREAD_COLOR,
                                   cv2.INTER_LINEAR)),
        ("depth PNG", "depth.png",
         lambda r: _imread(r[0] / "depth" / f"{r[1]:04d}.png", cv2.IMREAD_UNCHANGED)),
        ("semantics PNG", "semantics.png",
         lambda r: _imread(r[0] / "semantics" / f"{r[1]:04d}.png", cv2.IMREAD_UNCHANGED)),
        ("bev PNG", "bev.png",
         lambda r: _imread(r[0] / "bev_semantics" / f"{r[1]:04d}.png", cv2.IMREAD_UNCHANGED)),
        ("lidar (LAZ / npy)", "lidar.npy", lambda r: ds.lidar(*r)),
        ("boxes (json.gz / npy)", "boxes.npy", lambda r: ds.boxes(*r)),
        ("measurements + waypoints (9 json.gz / record npy)", "measurements.npy",
         lambda r: ds.measurements(*r)),
    ]
    for label, member, per_file in steps:
        data = list(_members(shards, "." + member)[k] for k in keys)
        codec = codec_named(members[member])
        rows.append((label, _best_us(per_file, routes, repeats) / 1e3,
                     _best_us(codec.decode, data, repeats) / 1e3))
    return rows


def lidar_codecs(workdir: Path, repeats: int) -> list[dict]:
    """Per-sample decode us and bytes of the same clouds as LAZ (the LAZ pack's members), as
    (N,3) npy (the default pack's) and as (N,4) npy (xyz + a zero column)."""
    from carla_wds.codecs import codec_named
    from carla_wds.modalities import encode_laz
    laz, pts = codec_named("laz"), codec_named("points")
    small_laz = _members(workdir / "shards_laz", ".lidar.laz")
    small_npy = _members(workdir / "shards", ".lidar.npy")
    keys = sorted(small_laz)
    clouds = [laz.decode(small_laz[k]) for k in keys]
    if not all(np.array_equal(c, pts.decode(small_npy[k])[:, :3]) for c, k in zip(clouds, keys)):
        raise SystemExit("the npy pack's clouds differ from the LAZ pack's")
    big, acc = [], []
    for c in clouds:   # consecutive frames stacked to about BIG_CLOUD points
        acc.append(c)
        if sum(map(len, acc)) >= BIG_CLOUD:
            big.append(laz.decode(encode_laz(np.concatenate(acc))))   # 1 mm grid, as stored
            acc = []

    def with_zero(c: np.ndarray) -> np.ndarray:
        return np.concatenate([c, np.zeros((len(c), 1), np.float32)], axis=1)

    out = []
    for label, cset, laz_bytes in (("synthetic frames", clouds, [small_laz[k] for k in keys]),
                                   ("stacked to ~40k points", big, [encode_laz(c) for c in big])):
        if not cset:
            continue
        npy3 = [pts.encode(c) for c in cset]
        npy4 = [pts.encode(with_zero(c)) for c in cset]
        out.append({"clouds": label, "n": len(cset), "points": np.mean([len(c) for c in cset]),
                    "laz_us": _best_us(laz.decode, laz_bytes, repeats),
                    "npy3_us": _best_us(pts.decode, npy3, repeats),
                    "npy4_us": _best_us(pts.decode, npy4, repeats),
                    "laz_bytes": np.mean([len(b) for b in laz_bytes]),
                    "npy3_bytes": np.mean([len(b) for b in npy3]),
                    "npy4_bytes": np.mean([len(b) for b in npy4])})
    return out
