"""LEAD's pickles through the opcode walker (issue 38 N1, N2, Low 2): what LEAD's writer
emits (xz of pickletools.optimize(pickle.dumps(value, HIGHEST_PROTOCOL)), and numpy's protocol
2-4 array form) reads back equal; a dtype state the file supplies, a strided ndarray, a huge
void scalar, a memo bomb, a deep list, a cycle and any dtype but a plain numeric one are each
a one-line refusal naming what or which limit; a hostile metas file in a real pack is a
counted skip or a one-line error naming it, and nothing of the packer's memory reaches a shard.
"""
from __future__ import annotations

import json
import lzma
import os
import pickle
import pickletools
import secrets
import tarfile
from pathlib import Path

import numpy as np
import pytest

from carla_wds import limits
from carla_wds.pack.datasets.lead.pickles import plain, read_lead_pickle
from carla_wds.pack.synth.lead import synth_dataset

ROUTE = "Accident/Town12_Rep0_3790_0_route0_01_10_05_46_05"
# numpy's own reconstructors, whatever their module is called in this numpy
FROMBUFFER = np.arange(2).__reduce_ex__(5)[0]
RECONSTRUCT = np.arange(2).__reduce_ex__(2)[0]
SCALAR = np.float64(1).__reduce__()[0]


class _Reduce:
    """Pickles as the reduce tuple it is given: what a crafted file can say."""

    def __init__(self, *reduce: object) -> None:
        self.reduce = reduce

    def __reduce__(self):
        return self.reduce


def lead_bytes(value: object, protocol: int = pickle.HIGHEST_PROTOCOL) -> bytes:
    """common_utils.write_pickle's bytes."""
    return lzma.compress(pickletools.optimize(pickle.dumps(value, protocol)))


def read(data: bytes) -> object:
    return read_lead_pickle(data, "r/metas/0009.pkl", True)


def refused(data: bytes, match: str, **lower: int) -> str:
    """The one-line ValueError reading `data` gives (with `lower` limits), matching `match`."""
    with limits.using(limits.active().with_overrides(lower)):
        with pytest.raises(ValueError, match=match) as err:
            read(data)
    assert "\n" not in str(err.value)
    return str(err.value)


def _metas() -> dict:
    """A metas dict in the types LEAD's expert writes them (expert.py l.2969-3155)."""
    rng = np.random.default_rng(3)
    calib = {k: {"width": 384, "height": 384, "fov": 60.0, "pos": [0.8, 0.0, 1.6]}
             for k in (1, 2, 3)}
    return {"pos_global": [152.25, -40.5], "theta": np.float64(0.31), "speed": np.float32(4.5),
            "ego_matrix": rng.normal(size=(4, 4)).astype(np.float32),
            "future_positions": rng.normal(size=(61, 3)).astype(np.float32),
            "future_yaws": rng.normal(size=61).astype(np.float32),
            "next_target_points_3.25": [[1.0, 2.0, 0.0], [3.0, 4.0, 0.0]],
            "next_commands_3.25": [4, -1], "brake": np.bool_(False), "town": "Town12",
            "dist_to_pedestrian": float("inf"), "vehicle_door_side": None,
            "ego_lane_id": np.int64(-1), "rear_adversarial_id": 2 ** 40,
            "route": rng.normal(size=(50, 2)).astype(np.float32),
            "past_filtered_state": np.asfortranarray(rng.normal(size=(4, 4))),
            "every_other": np.arange(10.0)[::2], "mask": np.ones(3, bool),
            "ids": np.arange(5, dtype=np.uint16), "big_endian": np.array([1, 2], ">i4"),
            "half": np.float16(0.5), "empty": np.zeros((0, 3), np.float32), "pair": (1, "a"),
            "sensor_information": {"num_cameras": 3, "camera_calibration": calib}}


def _boxes() -> list:
    """A boxes list (expert_data.py get_bounding_boxes): the ego, then cars (float16)."""
    ego = {"class": "ego_car", "extent": [2.45, 1.08, 0.76], "position": [0, 0, 0],
           "yaw": 0.0, "id": 100, "speed": 4.5, "brake": False,
           "matrix": [[1.0, 0.0, 0.0, 5.0], [0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 1.0, 0.0],
                      [0.0, 0.0, 0.0, 1.0]]}
    cars = [{"class": "car", "extent": [2.1, 0.9, 0.8], "id": 7 + i, "num_points": 20,
             "position": [10.0 * i, 1.5, 0.0], "yaw": np.float32(0.1 * i),
             "future_positions": np.full((41, 2), i, np.float16),
             "future_yaws": np.zeros(41, np.float16)} for i in range(3)]
    return [ego, *cars]


def same(a: object, b: object) -> bool:
    """Equal values of equal types; arrays equal in dtype (byte order too), shape and data."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.dtype.byteorder == b.dtype.byteorder \
            and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("value", [_metas(), _boxes()], ids=["metas", "boxes"])
def test_what_lead_writes_reads_back_equal(value, protocol):
    """protocol 5 is what LEAD writes; 2-4 are numpy's _reconstruct + BUILD form (2 with
    its bytes through _codecs.encode), unoptimised too."""
    for data in (lead_bytes(value, protocol), pickle.dumps(value, protocol)):
        got = read(data)
        assert same(got, value)
        json.dumps(plain(got))   # and it is stored as JSON
    assert read(lead_bytes(_metas()))["past_filtered_state"].flags.f_contiguous


def test_numpy_1x_module_names_read():
    """numpy 1.x pickles name numpy.core, 2.x numpy._core (LEAD's data may be either)."""
    data = pickle.dumps(_metas(), 2)   # GLOBAL opcodes: names end at a newline
    old = data.replace(b"numpy._core.", b"numpy.core.")
    assert old != data and b"numpy._core" not in old
    assert same(read(old), _metas())


def _fields_dtype(typestr: str) -> _Reduce:
    """issue 38 N1: a dtype whose BUILD state gives a field past its 8-byte item - `('u1',
    (1 MiB,))` at offset 8, or for a
    numeric type string a plain `u1` at offset 1 MiB: numpy's own dtype.__setstate__ takes
    either, and reading the field reads the packer's heap."""
    field = (np.dtype(("u1", (1 << 20,))), 8) if typestr == "V8" else (np.dtype("u1"), 1 << 20)
    state = (3, "|", None, ("a",), {"a": field}, 8, 1, 16)
    return _Reduce(np.dtype, (typestr, False, True), state)


def _fields_metas(typestr: str, meta: dict | None = None) -> bytes:
    """`meta` (a real frame's) with one array of that dtype over an 8-byte buffer."""
    arr = _Reduce(FROMBUFFER, (bytearray(8), _fields_dtype(typestr), (1,), "C"))
    return lead_bytes({**(meta or {"speed": 1.0}), "future_speeds": arr})


@pytest.mark.parametrize("typestr", ["V8", "f8"])
def test_a_dtype_state_from_the_file_is_refused(typestr):
    """The dtype is refused before numpy sees the state: not a numeric type string, or a
    numeric one whose state is not the plain numeric one."""
    message = refused(_fields_metas(typestr), "refused.*dtype")
    assert "fields" in message if typestr == "f8" else "'V8'" in message


def test_a_strided_ndarray_is_refused():
    """numpy.ndarray called with a stride of 0: 2**30 float64 over 8 bytes (N2)."""
    arr = _Reduce(np.ndarray, ((1 << 30,), np.dtype("f8"), bytearray(8), 0, (0,)))
    refused(lead_bytes({"future_positions": arr}), "refused.*numpy.ndarray")


def test_a_huge_void_scalar_is_refused():
    """scalar(dtype('V2000000000'), b'') would allocate 2 GB (N2)."""
    big = _Reduce(SCALAR, (np.dtype("V2000000000"), b""))
    refused(lead_bytes({"speed": big}), "refused.*dtype 'V2000000000'")


def test_a_memo_bomb_is_refused_by_pickle_values():
    """10**9 shared leaves from a few hundred bytes of memo references (N2)."""
    bomb: list = ["leaf"] * 10
    for _ in range(8):
        bomb = [bomb] * 10
    data = lead_bytes({"future_positions": bomb})
    assert len(data) < 2000
    refused(data, "over the limit pickle_values=4,000,000.*--limit pickle_values")


def test_a_genuine_array_counts_its_elements():
    """An array within array_bytes still counts its elements as stored (N2: a 255 MiB array
    once tolist() and JSON expand it); at a lowered limit, 5,000 float64 are too many."""
    data = lead_bytes({"future_positions": np.zeros(5000)})
    refused(data, "over the limit pickle_values=1,000", pickle_values=1000)
    assert read(data)["future_positions"].shape == (5000,)   # the default allows it


def test_a_deep_list_is_one_line_naming_json_depth():
    """A list nested 100k deep (Low 2: plain() raised a bare RecursionError)."""
    n = 100_000
    deep = b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b"."
    refused(lzma.compress(deep), "over the limit json_depth=100")
    ok = b"\x80\x04" + b"]" * 99 + b"a" * 98 + b"."   # 99 deep: read and stored
    assert json.dumps(plain(read(ok))).startswith("[[[")


def test_a_cycle_and_a_set_are_refused():
    loop: list = []
    loop.append(loop)
    refused(lead_bytes({"route": loop}), "refused.*cycle")
    refused(lead_bytes({"route": {1, 2}}), "refused.*opcode EMPTY_SET")


@pytest.mark.parametrize("dtype", ["O", "V8", "U4", "f4,i4", "M8[s]", "c16"])
def test_only_numeric_dtypes_are_read(dtype):
    arr = np.zeros(2, dtype) if dtype != "O" else np.array([None, 1], object)
    refused(lead_bytes({"future_positions": arr}), "refused.*the dtype '")
    scalar = arr[0] if dtype not in ("O", "f4,i4") else None
    if scalar is not None:
        refused(lead_bytes({"speed": scalar}), "refused.*the dtype '")


@pytest.mark.parametrize("module, name", [("os", "system"), ("posix", "system"),
                                          ("builtins", "eval"), ("numpy", "load")])
def test_other_globals_are_refused_by_name(module, name):
    def short(text: str) -> bytes:   # SHORT_BINUNICODE
        return b"\x8c" + bytes([len(text)]) + text.encode()

    for data in (b"\x80\x02" + f"c{module}\n{name}\n".encode() + b")R.",        # GLOBAL
                 b"\x80\x05" + short(module) + short(name) + b"\x93)R."):    # STACK_GLOBAL
        refused(data, f"refused.*the global {module}.{name}")


def _shard_metas(out: Path) -> list[bytes]:
    """Every metas.json of the pack's shards, and each list of byte-sized ints in them as
    bytes (N1's heap came out as such a list)."""
    found: list[bytes] = []
    for shard in sorted(out.rglob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                if member.name.endswith("metas.json"):
                    stack = [json.loads(tar.extractfile(member).read())]
                    while stack:
                        v = stack.pop()
                        if isinstance(v, dict):
                            stack.extend(v.values())
                        elif isinstance(v, list):
                            if v and all(type(x) is int and 0 <= x < 256 for x in v):
                                found.append(bytes(v))
                            stack.extend(v)
    return found


def test_a_hostile_metas_in_a_pack_is_a_skip_or_one_error_and_leaks_nothing(
        tmp_path, cli, monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("CARLA_WDS_TEST_SECRET_ACCESS_KEY", secret)
    assert os.environ["CARLA_WDS_TEST_SECRET_ACCESS_KEY"] == secret
    raw = tmp_path / "raw"
    synth_dataset(raw, episodes=1, frames=18, seed=4, image_size=(16, 16), progress=False)
    metas = raw / ROUTE / "metas" / "0009.pkl"
    # the synthetic frame's own metas (this test's file, trusted), plus N1's array
    metas.write_bytes(_fields_metas("V8", pickle.loads(lzma.decompress(metas.read_bytes()))))
    result = cli("pack", raw, tmp_path / "stop", "--layout", "lead", "--allow-pickle-input")
    errors = [ln for ln in result.output.splitlines() if ln.startswith("Error")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert ROUTE in errors[0] and "metas/0009.pkl" in errors[0] and "dtype" in errors[0]
    out = tmp_path / "skip"
    result = cli("pack", raw, out, "--layout", "lead", "--allow-pickle-input",
                 "--on-error", "skip")
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(s["frame"], s["file"]) for s in manifest["skipped"]] == [(9, "metas/0009.pkl")]
    assert manifest["counts"]["samples"] == 1
    kept = _shard_metas(out)
    files = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert secret.encode() not in files and not any(secret.encode() in b for b in kept)
