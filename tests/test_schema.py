"""The sample schema: keys, codecs, spec checks and sample validation."""
from __future__ import annotations

import io
import json
import pickle

import cv2
import numpy as np
import pytest

from carla_wds.schema import (
    CODECS,
    LABEL_MEMBERS,
    SampleSpec,
    SchemaError,
    codec_for,
    encode_sample,
    make_key,
    validate_sample,
)


def _labels(pred_len: int = 4) -> dict:
    wp = np.arange(pred_len * 2, dtype=np.float64).reshape(pred_len, 2)
    return {"speed": 3.5, "meta": {"episode": "Town01/r", "frame": 3, "command": 4},
            "target_point": [1.0, -2.0], "target_command": np.eye(6)[3],
            "waypoints": wp, "waypoints_diff": np.diff(np.vstack([[0, 0], wp]), axis=0)}


def _png(h: int = 12, w: int = 16) -> bytes:
    rgb = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    return cv2.imencode(".png", rgb)[1].tobytes()


def test_make_key_maps_slashes_and_pads_frame():
    assert make_key("Town01/routes_00", 7) == "Town01__routes_00__0007"
    assert "." not in make_key("Town01/routes_00", 12345)


def test_make_key_refuses_dot_unless_replaced():
    with pytest.raises(SchemaError, match="dot") as exc:
        make_key("Town01/route.v2", 0)
    assert "--dot-replacement" in str(exc.value)
    assert make_key("Town01/route.v2", 0, dot_replacement="_") == "Town01__route_v2__0000"


def test_make_key_refuses_other_characters():
    with pytest.raises(SchemaError, match="characters"):
        make_key("Town01/route 2", 0)


@pytest.mark.parametrize("kwargs", [dict(cameras=()), dict(cameras=("top",)),
                                    dict(cameras=("front",), pred_len=0),
                                    dict(cameras=("front",), image_format="bmp")])
def test_sample_spec_rejects_bad_values(kwargs):
    kwargs.setdefault("pred_len", 4)
    with pytest.raises(SchemaError):
        SampleSpec(**kwargs)


def test_spec_members_and_shapes():
    spec = SampleSpec(("front", "left"), 3, "jpg")
    assert spec.members == ("front.jpg", "left.jpg") + LABEL_MEMBERS
    assert spec.shapes()["waypoints.npy"] == (3, 2)
    assert spec.shapes()["target_command.npy"] == (6,)


def test_codecs_round_trip():
    arr = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(CODECS["npy"].decode(CODECS["npy"].encode(arr)), arr)
    assert CODECS["json"].decode(CODECS["json"].encode({"b": 1, "a": [2]})) == {"a": [2], "b": 1}
    rgb = np.random.default_rng(1).integers(0, 255, (10, 14, 3), dtype=np.uint8)
    np.testing.assert_array_equal(CODECS["png"].decode(CODECS["png"].encode(rgb)), rgb)
    assert CODECS["jpg"].decode(CODECS["jpg"].encode(rgb)).shape == (10, 14, 3)


def test_pickles_are_refused_never_decoded():
    for name in ("target_command.pth", "x.pkl", "y.pickle"):
        with pytest.raises(SchemaError, match="pickle"):
            codec_for(name)
    obj = np.asarray([{"a": 1}], dtype=object)
    buf = io.BytesIO()
    np.save(buf, obj, allow_pickle=True)
    with pytest.raises(ValueError):
        CODECS["npy"].decode(buf.getvalue())


def test_encode_sample_gives_all_members_as_bytes():
    spec = SampleSpec(("front",), 4)
    sample = encode_sample(spec, "k__0000", {"front": _png()}, _labels())
    assert sample["__key__"] == "k__0000"
    assert set(sample) - {"__key__"} == set(spec.members)
    assert all(isinstance(v, bytes) for k, v in sample.items() if k != "__key__")
    wp = np.load(io.BytesIO(sample["waypoints.npy"]))
    assert wp.dtype == np.float32 and wp.shape == (4, 2)
    assert json.loads(sample["speed.json"]) == 3.5
    validate_sample(spec, sample, "here")


@pytest.mark.parametrize("break_it, match", [
    (lambda s: s.pop("waypoints.npy"), "missing member"),
    (lambda s: s.update({"waypoints.npy": CODECS["npy"].encode(np.zeros((3, 2), np.float32))}),
     "shape"),
    (lambda s: s.update({"target_point.npy": CODECS["npy"].encode(np.zeros(2, np.float64))}),
     "dtype"),
    (lambda s: s.update({"target_command.npy": CODECS["npy"].encode(np.ones(6, np.float32))}),
     "one-hot"),
    (lambda s: s.update({"speed.json": b"NaN"}), "finite"),
    (lambda s: s.update({"speed.json": b"1e308"}), "beyond float32 range"),
    (lambda s: s.update({"waypoints.npy": CODECS["npy"].encode(
        np.array([[0, 1], [0, np.inf], [0, 2], [0, 3]], np.float32))}),
     "waypoints.npy holds non-finite"),
    (lambda s: s.update({"target_point.npy": CODECS["npy"].encode(
        np.array([np.nan, 1], np.float32))}), "target_point.npy holds non-finite"),
    (lambda s: s.update({"front.png": b"\x89PNG\r\n\x1a\nnot really"}), "not a PNG"),
    (lambda s: s.update({"extra.pth": pickle.dumps(1)}), "pickle"),
])
def test_validate_sample_names_the_problem(break_it, match):
    spec = SampleSpec(("front",), 4)
    sample = encode_sample(spec, "k__0000", {"front": _png()}, _labels())
    break_it(sample)
    with pytest.raises(SchemaError, match=match) as exc:
        validate_sample(spec, sample, "shard-000000.tar:k__0000")
    assert "k__0000" in str(exc.value)


@pytest.mark.parametrize("array", [
    np.zeros((4, 2), np.float32), np.arange(6, dtype=np.float32), np.float32(3.5),
    np.ones(3, np.float64), np.zeros((0, 2), np.float32), np.ones((2, 3), ">f4"),
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2)),
])
def test_npy_codec_writes_np_save_bytes(array):
    """The npy encoder caches headers; its bytes must stay np.save's, and round-trip."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    encoded = CODECS["npy"].encode(array)
    assert encoded == buf.getvalue()
    decoded = CODECS["npy"].decode(encoded)
    assert decoded.dtype == array.dtype and decoded.shape == np.shape(array)
    assert np.array_equal(decoded, array)


def test_npy_codec_refuses_object_arrays():
    with pytest.raises(SchemaError, match="object array"):
        CODECS["npy"].encode(np.array([{"a": 1}], dtype=object))


def test_road_options_are_carlas_and_the_one_hot_follows_them():
    from carla_wds.pack.labels import command_onehot
    from carla_wds.schema import COMMAND_NAMES, COMMANDS, N_COMMANDS, RoadOption
    carla = {"VOID": -1, "LEFT": 1, "RIGHT": 2, "STRAIGHT": 3, "LANEFOLLOW": 4,
             "CHANGELANELEFT": 5, "CHANGELANERIGHT": 6}   # agents.navigation.local_planner
    assert {o.name: o.value for o in RoadOption} == carla
    assert N_COMMANDS == len(COMMANDS) == len(COMMAND_NAMES) == 6
    for i, option in enumerate(COMMANDS):
        assert int(np.argmax(command_onehot(option))) == i
    assert int(np.argmax(command_onehot(RoadOption.VOID))) == COMMANDS.index(RoadOption.LANEFOLLOW)


def test_command_names_and_counts_are_defined_in_schema_only():
    """No other module spells a RoadOption name or label, or the number of commands, itself."""
    import ast
    from pathlib import Path

    import carla_wds
    from carla_wds.schema import COMMAND_NAMES, RoadOption
    # "left"/"right"/"straight" alone are also camera names and plot words
    words = {o.name for o in RoadOption} | {label for label in COMMAND_NAMES if " " in label}
    root = Path(carla_wds.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.name == "schema.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in words:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r}")
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if {"N_COMMANDS", "COMMAND_NAMES", "ROAD_OPTIONS", "LANEFOLLOW"} & set(names):
                found.append(f"{path.relative_to(root)}:{node.lineno} defines {names}")
    assert not found, found


def test_a_camera_subset_keeps_the_recorded_codecs():
    spec = SampleSpec(("front", "left"), 4, "png", (("meta.json", "json"), ("left.png", "png")))
    sub = spec.with_cameras(("left",))
    assert sub.cameras == ("left",) and sub.codecs == spec.codecs
    assert sub.members == ("left.png",) + LABEL_MEMBERS
    assert sub.codec_names()["left.png"] == "png"
