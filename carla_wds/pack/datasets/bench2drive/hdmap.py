"""One Bench2Drive HD map (`maps/<Town>_HD_map.npz`) read without unpickling, and turned into
typed arrays: every lane polyline with its type, every trigger volume with its type.

The file (Bench2Drive@0.0.4 tools/gen_hdmap.py l.364-365) is np.savez_compressed of one member,
`arr`: an (N, 2) object array of (road_id, {lane_id: [lane dicts], 'Trigger_Volumes': [volume
dicts]}) pairs, which np.save stores as a pickle after the .npy header. It is read only with
--allow-pickle-input, through the pack wing's opcode walker (pack/pickle_walk.py,
Walk(objects=True)): plain dicts, lists, tuples, strings, numbers and numeric arrays, and the
object array itself built as nested lists; any other global (os.system, ...) or opcode is
refused naming the file, and nothing from the file is ever run.

What is kept is what Bench2DriveZoo's prepare_B2D.py `gengrate_map` keeps (Thinklab-SJTU/
Bench2DriveZoo@10a2e5d mmcv/datasets/prepare_B2D.py l.147-190): for each lane dict its points'
locations (`raw_point[0]`, l.171) and 'Type' (l.174); for each trigger volume its 'Points'
(l.164) and 'Type' (l.168); both with y negated into their right-handed frame (l.165, l.172),
in the order they iterate (roads, then lanes, then the list). Their lane_sample_points (every
50th point and the last, l.175-182) and trigger_volumes_sample_points (the mean, l.167) are
not stored: they follow from these arrays.
"""
from __future__ import annotations

import io
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .... import limits
from ...pickle_measure import measure
from ...pickle_walk import Walk
from ...sources import PICKLE_FLAG, PickleRefused

MEMBER = "arr.npy"
TRIGGERS = "Trigger_Volumes"
TOWN = re.compile(r"^[A-Za-z0-9]{1,64}$")
MAX_TYPE_CHARS = 64


@dataclass
class TownMap:
    """One town's map as typed arrays (right-handed, metres): polyline i's points are
    points[offsets[i]:offsets[i + 1]]."""
    lane_points: list[np.ndarray] = field(default_factory=list)
    lane_types: list[str] = field(default_factory=list)
    lane_ids: list[tuple[int, int]] = field(default_factory=list)   # (road_id, lane_id)
    trigger_points: list[np.ndarray] = field(default_factory=list)
    trigger_types: list[str] = field(default_factory=list)


def town_of(file_name: str) -> str:
    """The town a map file names, as prepare_B2D.py reads it (file_name.split('_')[0], l.152);
    ValueError for a name that could not be a town (it names the pack's files)."""
    town = file_name.split("_")[0]
    if not TOWN.match(town):
        raise ValueError(f"{file_name}: names the town {town[:80]!r}; expected "
                         "<Town>_HD_map.npz with a town of letters and digits (Town12)")
    return town


def read_map(data: bytes, where: str, allowed: bool) -> TownMap:
    """One map .npz's bytes -> its TownMap. PickleRefused without --allow-pickle-input;
    ValueError (LimitError) naming `where`, the road and the lane for anything else wrong."""
    if not allowed:
        raise PickleRefused(
            f"{where}: a pickled numpy object array (Bench2Drive's HD map); carla-wds does not "
            f"unpickle raw input unless you say the source is trusted. Fix: if this is your "
            f"own copy of Bench2Drive's maps, pass {PICKLE_FLAG}; it is then read by carla-wds' "
            "own pickle reader (plain values and numeric arrays only, nothing run) and stored "
            "as plain arrays, never as a pickle")
    try:
        walk = Walk(objects=True)
        value = walk.run(_pickle_of(data))
        shared = walk.shared()
        del walk   # its memo holds every container: freed before measure walks them
        measure(value, shared)
        return _town(value)
    except limits.LimitError as exc:
        raise _named_limit(exc, where) from None
    except (ValueError, TypeError, OverflowError, IndexError) as exc:
        raise ValueError(f"{where}: refused ({_one_line(exc)}); expected Bench2Drive's HD map "
                         "(gen_hdmap.py: roads of lane dicts and trigger volumes)") from None


def _named_limit(exc: limits.LimitError, where: str) -> limits.LimitError:
    """The same LimitError with the file named first (the limit and its fix kept)."""
    err = limits.LimitError.__new__(limits.LimitError)
    ValueError.__init__(err, f"{where}: {exc.args[0]}")
    err.name, err.have, err.limit = exc.name, exc.have, exc.limit
    return err


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _pickle_of(data: bytes) -> bytes:
    """The pickle after arr.npy's header: the member's declared size within array_bytes before
    it is inflated, inflated to that size at most (zipfile checks its CRC), an object .npy."""
    lim = limits.active()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
            if names != [MEMBER]:
                raise ValueError(f"holds {names[:5]}; expected one member {MEMBER}")
            info = z.getinfo(MEMBER)
            if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED,
                                                                  zipfile.ZIP_DEFLATED):
                raise ValueError(f"{MEMBER} is encrypted or uses compression "
                                 f"{info.compress_type}; expected np.savez_compressed's")
            lim.check("array_bytes", info.file_size, f"the .npz member {MEMBER}, unpacked, "
                      "in bytes")
            with z.open(info) as member:
                _object_header(member)
                raw = member.read(info.file_size + 1)   # to its end: the CRC is checked
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
            RuntimeError) as exc:
        raise ValueError(f"not a readable .npz ({_one_line(exc)}); a truncated or corrupt "
                         "file: re-download it") from None
    return raw


def _object_header(fp) -> None:
    """An .npy 1.0/2.0 header (numpy's bounded header parser) of a 2-D object array."""
    fmt = np.lib.format
    version = fmt.read_magic(fp)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"{MEMBER} is .npy format {version}; expected 1.0 or 2.0")
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, fortran, dtype = read(fp)
    if not dtype.hasobject or len(shape) != 2 or shape[1] != 2 or fortran:
        raise ValueError(f"{MEMBER} holds {dtype} {shape}; expected an (N, 2) object array "
                         "of (road_id, road) pairs")


def _town(value: Any) -> TownMap:
    """gengrate_map's walk over the pairs (l.160-182), each part checked as it is read."""
    if type(value) is not list or not all(type(p) is list and len(p) == 2 for p in value):
        raise ValueError("arr is not (road_id, road) pairs")
    out = TownMap()
    for road_id, road in value:
        if type(road_id) is not int or type(road) is not dict:
            raise ValueError(f"road {str(road_id)[:40]} is a {type(road).__name__} under a "
                             f"{type(road_id).__name__} id; expected a dict under an int id")
        for lane_id, lanes in road.items():
            if type(lanes) is not list:
                raise ValueError(f"road {road_id} lane {str(lane_id)[:40]} is not a list")
            if lane_id == TRIGGERS:
                for k, volume in enumerate(lanes):
                    where = f"road {road_id} trigger volume {k}"
                    out.trigger_points.append(_xyz(_get(volume, "Points", where), where))
                    out.trigger_types.append(_type(volume, where))
                continue
            if type(lane_id) is not int:
                raise ValueError(f"road {road_id} has a lane {str(lane_id)[:40]!r}; expected "
                                 f"int lane ids and '{TRIGGERS}'")
            for k, lane in enumerate(lanes):
                where = f"road {road_id} lane {lane_id} polyline {k}"
                points = _get(lane, "Points", where)
                if type(points) is not list or not all(type(p) in (list, tuple) and p
                                                       for p in points):
                    raise ValueError(f"{where}: Points is not a list of (location, rotation)")
                out.lane_points.append(_xyz([p[0] for p in points], where))
                out.lane_types.append(_type(lane, where))
                out.lane_ids.append((road_id, lane_id))
    return out


def _get(d: Any, key: str, where: str) -> Any:
    if type(d) is not dict or key not in d:
        raise ValueError(f"{where} is not a dict with {key!r}")
    return d[key]


def _type(d: dict, where: str) -> str:
    kind = _get(d, "Type", where)
    if type(kind) is not str or not 0 < len(kind) <= MAX_TYPE_CHARS or not kind.isprintable():
        raise ValueError(f"{where}: its Type is not a short printable string")
    return kind


def _xyz(points: Any, where: str) -> np.ndarray:
    """(n, 3) float64 of n >= 1 finite (x, y, z), y negated (left-handed CARLA -> right)."""
    if type(points) is not list or not points or not all(
            type(p) in (list, tuple) and len(p) == 3 and all(
                type(c) in (int, float) or isinstance(c, (np.integer, np.floating)) for c in p)
            for p in points):
        raise ValueError(f"{where}: Points are not a non-empty list of (x, y, z) numbers")
    arr = np.array(points, dtype=np.float64)
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise ValueError(f"{where}: point {bad} is {tuple(float(c) for c in arr[bad])}, not "
                         "finite; expected metres (a corrupt map: re-download it)")
    arr[:, 1] *= -1
    return arr


__all__ = ["MEMBER", "TownMap", "read_map", "town_of"]
