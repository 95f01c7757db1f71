"""adapter="lead" against LEAD's own CARLAData batches (tests/golden/lead_batches.json, made by
tools/golden/lead_batches.py at kesai-labs/lead@44891760): the same synth routes packed by
carla-wds serve, per sample, every key of their collated batch with its type, dtype, shape and
value, with the own sensors and with the perturbated twin. The waypoints and target points are
also written here from their formulas on the raw metas. Packs their loader would not serve
this way are refused at construction, in one line with the pack command. No network, no
project code."""
from __future__ import annotations

import hashlib
import json
import lzma
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from carla_wds.load import CARLAWebData
from carla_wds.pack import PackOptions, pack
from carla_wds.pack.synth import synth_dataset
from tools.golden.common import tree_sha256

GOLDEN = Path(__file__).parents[2] / "golden" / "lead_batches.json"
ATOL = 1e-4      # the pack's labels are float32 (theirs float64, recorded float32-rounded)
NOT_SERVED = {"index", "global_index", "bucket_identity", "loading_meta_time", "loading_time",
              "loading_sensor_time"}
OURS_ONLY = {"valid", "key"}
DIGESTS = ("rgb", "rasterized_lidar", "semantic", "center_net_heatmap", "bev_semantic",
           "radar")
SPARSE = ("center_net_bounding_boxes", "center_net_wh", "center_net_yaw_class",
          "center_net_yaw_res", "center_net_offset", "center_net_velocity",
          "center_net_brake", "center_net_pixel_weight", "radar_detections")


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory, golden) -> Path:
    """The golden's routes, raw and packed as the adapter's pack command says."""
    synth, root = golden["synth"], tmp_path_factory.mktemp("lead")
    raw = root / "raw"
    synth_dataset(raw, synth["layout"], episodes=synth["episodes"], frames=synth["frames"],
                  seed=synth["seed"], image_size=tuple(synth["image_size"]), progress=False)
    assert tree_sha256(raw) == golden["raw_sha256"], (
        f"synth no longer writes the routes {GOLDEN} was made from: {golden['regenerate']}")
    pack(raw, root / "shards", PackOptions(layout="lead", allow_pickle_input=True,
                                           image_format="png", progress=False))
    return root


def served(root: Path, **kw) -> dict[tuple[str, str], dict]:
    """(route, frame) -> our batch's row as a batch of one, every valid row of one pass."""
    kw = {"batch_size": 4, "mode": "eval", "seed": 2, "adapter": "lead", **kw}
    out = {}
    for batch in CARLAWebData(str(root / "shards"), **kw):
        for i, ok in enumerate(batch["valid"].tolist()):
            if ok:
                row = {k: (v[i:i + 1] if isinstance(v, torch.Tensor) else v[i:i + 1])
                       for k, v in batch.items()}
                out[(row["route_number"][0], row["frame_number"][0])] = row
    return out


def raw_lidar(root: Path, route: str, frame: str) -> tuple[np.ndarray, float, float]:
    """The raw frame's LiDAR (float64 x, y, z, time) and its perturbation (metres, degrees)."""
    import laspy
    folder = next((root / "raw").glob(f"*/{route}"))
    las = laspy.read(folder / "lidar" / f"{frame}.laz")
    metas = pickle.loads(lzma.decompress((folder / "metas" / f"{frame}.pkl").read_bytes()))
    points = np.column_stack([np.asarray(las.xyz, np.float64), np.asarray(las["time"])])
    return points, float(metas["perturbation_translation"]), float(metas["perturbation_rotation"])


def raster(points: np.ndarray, y: float, yaw_deg: float) -> np.ndarray:
    """Their LiDAR input written here: sweeps with time < 10, moved by R(yaw)^T (p - (0, y, 0))
    in float64, -4 <= z <= 10, 0.25 m cells over x in [-32, 64], y in [-40, 40], capped at
    5 points, / 5, rows along y: (1, 320, 384)."""
    p = points[points[:, 3] < 10][:, :3]
    a = np.deg2rad(yaw_deg)
    rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    p = (rot.T @ (p - np.array([0.0, y, 0.0])).T).T
    p = p[(p[:, 2] >= -4) & (p[:, 2] <= 10)]
    hist, _, _ = np.histogram2d(p[:, 0], p[:, 1], bins=(384, 320), range=((-32, 64), (-40, 40)))
    return (np.minimum(hist, 5) / 5).T.astype(np.float32)[None]


def twin_lidar(ours: np.ndarray, digest: str, raw: tuple) -> None:
    """The twin's LiDAR: the formula above on the raw float64 points is theirs bit for bit;
    ours moves the pack's float32 points, so a point within float32 rounding (~1e-6 m) of a
    cell edge may fall in the next cell: at most 0.1% of the occupied cells differ, by 0.2."""
    theirs = raster(*raw)
    assert hashlib.sha256(theirs.tobytes()).hexdigest()[:len(digest)] == digest
    diff = np.abs(ours[None] - theirs)
    assert diff.max() <= 0.2 + 1e-6
    assert (diff > 0).sum() <= max(4, 0.001 * (theirs > 0).sum()), (diff > 0).sum()


def dense(w: dict, kind_: list) -> np.ndarray:
    """A sparse-recorded key (tools/golden/lead_batches.py SPARSE) as its full array."""
    _, dtype, shape = kind_
    out = np.zeros(shape, np.dtype(dtype))
    out[tuple(np.asarray(i, np.int64) for i in w["value"]["nonzero"])] = w["value"]["values"]
    return out


def kind(v) -> list:
    if isinstance(v, torch.Tensor):
        return ["Tensor", str(v.dtype).replace("torch.", ""), list(v.shape)]
    return [type(v).__name__]


def compare(ours: dict, golden: dict, which: str, root: Path) -> None:
    """Each of their samples against ours, key by key, all of theirs served (a key's kind in
    the golden's per-pass `kinds` where every sample's is the same)."""
    theirs, kinds = golden["samples"], golden["kinds"][which]
    assert sorted(ours) == sorted((t["route"], t["frame"]) for t in theirs)
    for t in theirs:
        s, want, where = ours[(t["route"], t["frame"])], t[which], (t["route"], t["frame"])
        assert set(s) - OURS_ONLY == set(want) - NOT_SERVED, where
        for name, w in want.items():
            if name in NOT_SERVED:
                continue
            want_kind = w.get("kind", kinds.get(name))
            assert kind(s[name]) == want_kind, (where, name)
            v = s[name]
            if "same_as" in w:          # their hdmap: the bev_semantic array itself
                assert torch.equal(v, s[w["same_as"]]), (where, name)
            elif "rows_of" in w:        # their radar1..radar4: the radar array's rows
                whole, start, stop = w["rows_of"]
                assert torch.equal(v, s[whole][:, start:stop]), (where, name)
            elif name == "rasterized_lidar" and which == "twin":
                twin_lidar(v[0].numpy(), w["value"], raw_lidar(root, t["route"], t["frame"]))
            elif name in SPARSE:
                np.testing.assert_allclose(v.numpy(), dense(w, want_kind), atol=ATOL, rtol=0,
                                           err_msg=f"{where} {name}")
            elif name in DIGESTS:
                digest = hashlib.sha256(v.numpy().tobytes()).hexdigest()
                assert digest[:len(w["value"])] == w["value"], (where, name)
            elif isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
                np.testing.assert_allclose(v.numpy(), w["value"], atol=ATOL,
                                           err_msg=f"{where} {name}")
            elif isinstance(v, torch.Tensor):
                assert v.tolist() == w["value"], (where, name)
            else:
                assert v == w["value"], (where, name)


def test_own_sensors_are_their_carladata_batch_key_for_key(built, golden):
    compare(served(built), golden, "own", built)


def test_perturbated_twin_is_their_perturbated_batch(built, golden):
    # every training sample drawn as the twin (their use_sensor_perburtation, p = 1)
    ours = served(built, mode="train", label_options={"garage_camera_twin": 1.0})
    compare(ours, golden, "twin", built)


def _metas(root: Path, route: str, frame: str) -> dict:
    folder = next((root / "raw").glob(f"*/{route}"))
    return pickle.loads(lzma.decompress((folder / "metas" / f"{frame}.pkl").read_bytes()))


def test_waypoints_and_target_points_from_their_formulas_on_the_metas(built):
    """future_positions[5, 10, ..., 40][:2]; the target points: next_target_points_3.25 with
    consecutive duplicates merged (not when exactly 2), [1] (next [2], previous [0]), as
    R(theta)^T (p - pos_global)."""
    ours = served(built)
    assert ours
    for (route, frame), s in ours.items():
        m = _metas(built, route, frame)
        future = np.asarray(m["future_positions"], np.float64)
        np.testing.assert_allclose(s["future_waypoints"][0].numpy(),
                                   future[5:41:5, :2], atol=ATOL)
        points = [np.asarray(p, np.float64)[:2] for p in m["next_target_points_3.25"]]
        merged = [p for i, p in enumerate(points) if len(points) == 2 or i == 0
                  or not np.allclose(p, points[i - 1])]
        c, si = np.cos(m["theta"]), np.sin(m["theta"])
        ego = np.asarray(m["pos_global"], np.float64)[:2]

        def local(p: np.ndarray) -> np.ndarray:
            d = p - ego
            return np.array([c * d[0] + si * d[1], -si * d[0] + c * d[1]])
        want = {"target_point": merged[1], "target_point_previous": merged[0],
                "target_point_next": merged[2] if len(merged) > 2 else merged[1]}
        for name, p in want.items():
            np.testing.assert_allclose(s[name][0].numpy(), local(p), atol=ATOL,
                                       err_msg=f"{route} {frame} {name}")


@pytest.fixture(scope="module")
def small_raw(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("lead_small") / "raw"
    synth_dataset(raw, "lead", episodes=1, frames=20, seed=1, image_size=(32, 48),
                  progress=False)
    return raw


@pytest.mark.parametrize("options, says", [
    ({}, "--image-format png"),
    ({"image_format": "jpg"}, "--image-format png"),
    ({"image_format": "png", "all_frames": True}, "--all-frames"),
    ({"image_format": "png", "resize": (16, 24)}, "--resize"),
    ({"image_format": "png"}, "cameras of [(32, 48)] (H, W); LEAD's config reads 384x384"),
])
def test_packs_their_loader_would_not_serve_are_refused_in_one_line(small_raw, tmp_path,
                                                                     options, says):
    out = tmp_path / "shards"
    pack(small_raw, out, PackOptions(layout="lead", allow_pickle_input=True, progress=False,
                                     **options))
    with pytest.raises(ValueError) as err:
        CARLAWebData(str(out), batch_size=2, adapter="lead", num_workers=2)
    text = str(err.value)
    assert "\n" not in text and says in text, text
    assert "Fix: carla-wds pack RAW OUT --layout lead --allow-pickle-input --image-format png" \
        in text and str(out) in text


def test_another_layout_is_refused_with_the_pack_command(tmp_path):
    raw = tmp_path / "raw"
    synth_dataset(raw, "garage", episodes=1, frames=24, seed=1, image_size=(32, 64),
                  progress=False)
    pack(raw, tmp_path / "shards", PackOptions(layout="garage", progress=False))
    with pytest.raises(ValueError) as err:
        CARLAWebData(str(tmp_path / "shards"), batch_size=2, adapter="lead", num_workers=2)
    text = str(err.value)
    assert "\n" not in text and "layout 'garage'" in text and "--layout lead" in text, text


def test_the_name_alone_sets_the_settings(built):
    with pytest.raises(ValueError, match="leave image_size out"):
        CARLAWebData(str(built / "shards"), batch_size=2, adapter="lead", image_size=(64, 64))


def test_lidar_filters_the_synth_routes_do_not_reach():
    """Sweeps 10 and later, points below -4 m or above 10 m and outside the grid are left out
    (the synth LiDAR has sweeps 0-1 and z within 2 m): ours equals the formula in this file."""
    from carla_wds.load.adapters.lead import rasterize
    rng = np.random.default_rng(0)
    xyz = rng.uniform([-40, -45, -6], [70, 45, 12], size=(20000, 3))
    points = np.column_stack([xyz, rng.integers(0, 14, len(xyz))])
    edges = np.array([[-32, -40, -4, 9], [63.99, 39.99, 10, 0], [64, 40, 10.01, 0],
                      [0.25, 0.5, -4.01, 10], [1, 1, 0, 9.5]] + [[5.1, 5.1, 0, 0]] * 7, np.float64)
    points = np.vstack([points, edges])
    ours = rasterize(points.astype(np.float32).astype(np.float64))
    want = raster(points.astype(np.float32).astype(np.float64), 0.0, 0.0)
    assert ours.shape == (1, 320, 384) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, want)
    assert want.max() == 1.0 and 0 < (want > 0).mean() < 1


def test_augment_draws_their_twin_and_colour_augmentation_repeatably(built):
    """augment=True (train): about half the samples are the perturbated twin (their
    use_sensor_perburtation_prob 0.5 in Leaderboard mode), each with its labels moved; their
    colour augmentation changes some cameras of the others; a second run draws the same."""
    own = served(built)
    runs = [served(built, mode="train", augment=True) for _ in range(2)]
    for a, b in zip(runs[0].values(), runs[1].values()):
        assert torch.equal(a["rgb"], b["rgb"]) and torch.equal(a["target_point"],
                                                               b["target_point"])
    drawn = runs[0]
    twins = [k for k, s in drawn.items() if bool(s["perturbate_sensor"])]
    assert 0 < len(twins) < len(drawn)
    for k, s in drawn.items():
        moved = not torch.allclose(s["future_waypoints"], own[k]["future_waypoints"])
        assert moved == (k in twins), k
        # their numeric metas list overwrites the drawn shift with the metas' own, twin or not
        assert torch.equal(s["perturbation_translation"], own[k]["perturbation_translation"])
    coloured = [k for k, s in drawn.items()
                if k not in twins and not torch.equal(s["rgb"], own[k]["rgb"])]
    assert coloured, "their colour augmentation changed no camera"


def test_a_none_in_the_metas_is_served_as_their_collate_fills_it():
    """mixed_data_collate_fn fills a None beside other samples' values with the type's
    default (False, 0, ""); vehicle_door_side None is "NA" and a list its first item; a
    numeric None is inf; numbers the metas lack are left out, as theirs."""
    from carla_wds.load.adapters.lead import META_TEXT, meta_values
    metas = {name: None for name in META_TEXT}
    metas.update({"speed": None, "theta": 0.5})
    out = meta_values(metas)
    assert out["stop_sign_hazard"] is False and out["ego_lane_id"] == 0
    assert out["town"] == "" and out["vehicle_door_side"] == "NA"
    assert out["current_active_scenario_type"] == "NA"
    assert out["speed"] == np.inf and out["theta"] == 0.5 and "steer" not in out
    assert meta_values({**metas, "vehicle_door_side": ["left"]})["vehicle_door_side"] == "left"
