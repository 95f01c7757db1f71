"""Bench2Drive's HD maps, synthesised for the towns the synth clips name: `<out>/maps/
<Town>_HD_map.npz`, in the structure Bench2Drive ships (beside `v1/`, as Bench2DriveZoo's
docs/DATA_PREP.md lays out `data/bench2drive/maps`).

The structure is Bench2Drive's tools/gen_hdmap.py (Thinklab-SJTU/Bench2Drive@0.0.4): a dict
road_id -> {lane_id: [marking or centre dicts], 'Trigger_Volumes': [volume dicts]} (its
docstring, l.146-164), saved as `np.savez_compressed(path, arr=np.array(list(d.items()),
dtype=object))` (l.364-365): an (N, 2) object array, pickled inside `arr.npy`.
- a lane marking (l.229, l.243): {'Points': [((x, y, z), (roll, pitch, yaw))], 'Type',
  'Color', 'Topology': [(road_id, lane_id)]}, its points the lane's waypoints shifted by
  -/+ half the lane width along the right vector (get_lateral_shifted_transform, l.319-330);
- a lane centre (l.213): the same with each point `((x, y, z), (roll, pitch, yaw),
  is_junction)`, Type 'Center', and 'TopologyType', 'Left', 'Right';
- a stop sign's volume (l.43-55, l.71-84): 5 corners of its box; a traffic light's (l.89-139):
  two points 0.4 lane widths either side of the lane where it meets the junction, then the
  same 0.5 m earlier, reversed; each {'Points': [[x, y, z]], 'Type', 'ParentActor_Location'}.

The world is world.py's road (CARLA's left-handed frame, as the clips' anno): lane -1 is the
ego's (centre at the road's centreline), lane 1 the oncoming one 3.5 m to its left. Markings
are Broken between the lanes (SolidSolid on the 10 m before a junction), Solid at the edges
and NONE inside junctions, as CARLA's towns paint them; each junction gets a traffic light
(a crossing) or a stop sign (a turn). A town holds the roads of every clip that names it.
The pickle is written as numpy 1.x's np.save writes it (protocol 3, `numpy.core` names), the
form of the released files, and byte-identical under numpy 2.
"""
from __future__ import annotations

import io
import math
import pickle
import zipfile
from pathlib import Path

import numpy as np

from . import world as base

STRIDE = 2               # road samples per map point: 1 m apart (gen_hdmap.py's are 0.05 m)
APPROACH = 10.0          # m of SolidSolid divider before a junction
_JUNCTIONS = (base._JUNCTION, base._TURN)


def town_of(clip: str) -> str:
    """The town a clip's name gives (<Scenario>_<Town>_Route<id>_Weather<id>), as
    prepare_B2D.py reads it (folder_name.split('_')[1])."""
    return clip.split("_")[1]


def _points(road: base._Road, idx: np.ndarray, shift: float, junction: bool | None = None,
            reverse: bool = False) -> list[tuple]:
    """Waypoints shifted `shift` m along CARLA's right vector (-sin, cos of the heading), as
    ((x, y, z), (roll, pitch, yaw deg)) in plain floats; with the junction flag for a centre."""
    out = []
    for i in (idx[::-1] if reverse else idx):
        h = float(road.heading[i]) + (math.pi if reverse else 0.0)
        x = float(road.x[i]) - shift * math.sin(road.heading[i])
        y = float(road.y[i]) + shift * math.cos(road.heading[i])
        point = ((x, y, 0.0), (0.0, 0.0, math.degrees(h)))
        out.append(point if junction is None else (*point, junction))
    return out


def _marking(points: list[tuple], kind: str, colour: str, topology: list) -> dict:
    return {"Points": points, "Type": kind, "Color": colour, "Topology": topology}


def _divider(road: base._Road, idx: np.ndarray, before_junction: bool, reverse: bool,
             topology: list) -> list[dict]:
    """The marking between the lanes: Broken, then SolidSolid on the approach to a junction
    (gen_hdmap.py starts a new marking where its type changes)."""
    cut = len(idx) - (int(APPROACH / base.DS / STRIDE) if before_junction else 0)
    parts = [(idx[:max(cut, 0) + 1], "Broken", "White"), (idx[max(cut, 0):], "SolidSolid",
                                                           "Yellow")]
    if reverse:
        parts = parts[::-1]
    return [_marking(_points(road, part, -base.LANE / 2, reverse=reverse), kind, colour, topology)
            for part, kind, colour in parts if len(part) > 1]


def _lane(road: base._Road, idx: np.ndarray, ids: tuple[int, int, int], junction: bool,
          before_junction: bool, lane: int) -> list[dict]:
    """Lane -1 (the ego's) or 1 (oncoming, driven the other way): its centre and markings."""
    road_id, prev_id, next_id = ids
    back = lane > 0
    topology = ([(prev_id, 1)] if prev_id >= 0 else []) if back else \
        ([(next_id, -1)] if next_id >= 0 else [])
    centre = _marking(_points(road, idx, -base.LANE if back else 0.0, junction, back),
                      "Center", "White", topology)
    centre.update(TopologyType="Junction" if junction else "Normal",
                  Left=(road_id, -lane), Right=(None, None))
    edge = -1.5 * base.LANE if back else base.LANE / 2
    if junction:
        return [centre, _marking(_points(road, idx, -base.LANE / 2, reverse=back), "NONE",
                                 "White", topology),
                _marking(_points(road, idx, edge, reverse=back), "NONE", "White", topology)]
    return [centre, *_divider(road, idx, before_junction, back, topology),
            _marking(_points(road, idx, edge, reverse=back), "Solid", "White", topology)]


def _volume(road: base._Road, j: int, kind: int) -> dict:
    """The trigger volume where the ego's lane enters the junction starting at sample j."""
    def at(i: int, shift: float) -> list[float]:
        (x, y, z), _ = _points(road, np.array([i]), shift)[0]
        return [x, y, z]
    if kind == base._JUNCTION:   # a traffic light: near pair, then the far pair reversed
        half = 0.4 * base.LANE
        pts = [at(j - 1, -half), at(j - 1, half), at(j - 2, half), at(j - 2, -half)]
        return {"Points": pts, "Type": "TrafficLight", "ParentActor_Location": at(j, 3.0)}
    c = j - int(2.0 / base.DS)   # a stop sign: its box 2 m before the junction, 1.5 m half-size
    h = float(road.heading[c])
    corners = [(-1.5, -1.5), (1.5, -1.5), (1.5, 0.0), (1.5, 1.5), (-1.5, 1.5)]
    pts = [[float(road.x[c]) + dx * math.cos(h) - dy * math.sin(h),
            float(road.y[c]) + dx * math.sin(h) + dy * math.cos(h), 0.0] for dx, dy in corners]
    return {"Points": pts, "Type": "StopSign", "ParentActor_Location": at(c, 3.0)}


def _runs(kind: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, kind) of each run of one segment kind: one CARLA road each."""
    cuts = np.flatnonzero(np.diff(kind)) + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, len(kind)]
    return [(int(a), int(b), int(kind[a])) for a, b in zip(starts, ends) if b - a > 2]


def road_map(road: base._Road, first_id: int) -> dict:
    """gen_hdmap.py's dict for one synth road, its road ids from first_id on."""
    runs = _runs(road.kind)
    out: dict = {}
    for r, (a, b, kind) in enumerate(runs):
        road_id = first_id + r
        ids = (road_id, road_id - 1 if r else -1, road_id + 1 if r + 1 < len(runs) else -1)
        idx = np.unique(np.r_[np.arange(a, b, STRIDE), b - 1])
        junction = kind in _JUNCTIONS
        ahead = r + 1 < len(runs) and runs[r + 1][2] in _JUNCTIONS
        out[road_id] = {lane: _lane(road, idx, ids, junction, ahead and not junction, lane)
                        for lane in (-1, 1)}
        if ahead and not junction and b - a > 8:
            out[road_id]["Trigger_Volumes"] = [_volume(road, b, runs[r + 1][2])]
    return out


def npz_bytes(town: dict) -> bytes:
    """np.savez_compressed(arr=np.array(list(town.items()), dtype=object)) as numpy 1.x writes
    it (np.save pickles object arrays with protocol 3), with a fixed zip time: reproducible."""
    arr = np.empty((len(town), 2), dtype=object)   # (np.array of the pairs gives this shape)
    for row, (road_id, lanes) in enumerate(town.items()):
        arr[row, 0], arr[row, 1] = road_id, lanes
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, np.lib.format.header_data_from_array_1_0(arr))
    npy.write(pickle.dumps(arr, protocol=3).replace(b"cnumpy._core.", b"cnumpy.core."))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        info = zipfile.ZipInfo("arr.npy", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, npy.getvalue())
    return buf.getvalue()


def write_town_maps(maps_dir: Path, roads: dict[str, base._Road]) -> list[Path]:
    """maps_dir/<Town>_HD_map.npz for every town the clips (name -> road) name, each holding
    the roads of its clips (ids 1000 apart per clip). Returns the files, sorted."""
    towns: dict[str, dict] = {}
    for k, clip in enumerate(sorted(roads)):
        towns.setdefault(town_of(clip), {}).update(road_map(roads[clip], 1000 * (k + 1)))
    maps_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for town in sorted(towns):
        path = maps_dir / f"{town}_HD_map.npz"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(npz_bytes(towns[town]))
        tmp.rename(path)
        out.append(path)
    return out
