"""`carla-wds pack-map`: Bench2Drive's `maps/*.npz` (pickles) -> a typed map pack of plain
arrays, one `<Town>.npz` per town (np.savez of numeric arrays only: np.load(...,
allow_pickle=False) reads it) and `maps.json`, the manifest recording each source file's
sha256. hdmap.py reads and checks each source file.

A town's arrays, in prepare_B2D.py's order and right-handed frame (hdmap.py):
  lane_points (P, 3) float64, lane_offsets (L + 1,) int64: polyline i is
    lane_points[lane_offsets[i]:lane_offsets[i + 1]]
  lane_type (L,) int16: an index into maps.json's lane_types; lane_road, lane_id (L,) int64
  trigger_points (Q, 3) float64, trigger_offsets (T + 1,) int64, trigger_type (T,) int16
    (into maps.json's trigger_types)

All or nothing: every source is read and checked, and with `clips` every town a clip names
must have a map, before OUT appears; the pack is written into a temporary folder beside OUT
and renamed to it, so a refused command leaves nothing behind.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ....fileio import atomic_write_bytes, atomic_write_json, fsync_dir
from ....progress import bar
from ...errors import PackError
from .clips import find_clips
from .hdmap import TownMap, read_map, town_of

log = logging.getLogger(__name__)
MANIFEST = "maps.json"
FORMAT = "carla-wds map pack"
SUFFIX = ".npz"


@dataclass
class MapPackReport:
    out: Path
    towns: dict[str, dict]

    def line(self) -> str:
        lanes = sum(t["lanes"] for t in self.towns.values())
        volumes = sum(t["trigger_volumes"] for t in self.towns.values())
        return (f"packed {len(self.towns)} town map(s) ({', '.join(self.towns)}): {lanes} "
                f"lane polylines, {volumes} trigger volumes -> {self.out}")


def map_files(maps_dir: Path) -> dict[str, Path]:
    """town -> its map file in maps_dir (every *.npz, as prepare_B2D.py lists them); PackError
    for none, or for two files of one town."""
    if not maps_dir.is_dir():
        raise PackError(f"MAPS_DIR {maps_dir} is not a directory. Fix: pass Bench2Drive's "
                        "maps/ folder (Town01_HD_map.npz, ...)")
    found: dict[str, Path] = {}
    for path in sorted(maps_dir.iterdir()):
        if not path.name.endswith(SUFFIX) or path.name.startswith("."):
            continue
        try:
            town = town_of(path.name)
        except ValueError as exc:
            raise PackError(f"{maps_dir}/{exc}") from None
        if town in found:
            raise PackError(f"{path} and {found[town]} both give the map of {town}. Fix: keep "
                            "one of them")
        found[town] = path
    if not found:
        raise PackError(f"MAPS_DIR {maps_dir}: no map .npz found; expected Bench2Drive's "
                        "<Town>_HD_map.npz files. Fix: pass the folder that holds them")
    return found


def check_clip_towns(clips_dir: Path, towns: set[str], maps_dir: Path) -> None:
    """PackError naming the first clip whose town (its name's second part, as prepare_B2D.py
    reads it, l.212) has no map."""
    for ref in find_clips(clips_dir):
        parts = ref.name.split("_")
        town = parts[1] if len(parts) > 1 else ""
        if town not in towns:
            raise PackError(f"clip {ref.name} names the town {town!r}, which has no map in "
                            f"{maps_dir} (maps of {', '.join(sorted(towns))}). Fix: add "
                            f"{maps_dir}/{town}_HD_map.npz from Bench2Drive's maps")


def _vocabulary(towns: dict[str, TownMap], attr: str) -> list[str]:
    return sorted({kind for town in towns.values() for kind in getattr(town, attr)})


def _offsets(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)


def _stack(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros((0, 3), np.float64)


def town_arrays(town: TownMap, lane_types: list[str], trigger_types: list[str]
                ) -> dict[str, np.ndarray]:
    """The typed arrays of one town (the module docstring's table)."""
    lane_code, trigger_code = ({k: i for i, k in enumerate(v)}
                               for v in (lane_types, trigger_types))
    ids = np.array(town.lane_ids, np.int64).reshape(-1, 2)
    return {"lane_points": _stack(town.lane_points), "lane_offsets": _offsets(town.lane_points),
            "lane_type": np.array([lane_code[k] for k in town.lane_types], np.int16),
            "lane_road": ids[:, 0].copy(), "lane_id": ids[:, 1].copy(),
            "trigger_points": _stack(town.trigger_points),
            "trigger_offsets": _offsets(town.trigger_points),
            "trigger_type": np.array([trigger_code[k] for k in town.trigger_types], np.int16)}


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)   # numeric arrays only: np.load(allow_pickle=False) reads it
    return buf.getvalue()


def _read_all(files: dict[str, Path], allow_pickle: bool, progress: bool
              ) -> tuple[dict[str, TownMap], dict[str, dict]]:
    """Every map read and checked (nothing written yet), with its source's size and sha256."""
    towns, sources = {}, {}
    for town, path in bar(files.items(), desc="pack-map", unit="map", disable=not progress):
        data = path.read_bytes()
        towns[town] = read_map(data, str(path), allow_pickle)
        sources[town] = {"source": path.name, "source_bytes": len(data),
                         "source_sha256": hashlib.sha256(data).hexdigest()}
        log.debug("%s: %d lanes, %d trigger volumes", path, len(towns[town].lane_types),
                  len(towns[town].trigger_types))
    return towns, sources


def pack_maps(maps_dir: str | Path, out: str | Path, allow_pickle: bool = False,
              clips: str | Path | None = None, progress: bool = True) -> MapPackReport:
    """Pack MAPS_DIR's Bench2Drive HD maps into the typed map pack OUT (a new folder). With
    `clips`, first checks that every clip's town has a map. PackError, ValueError (naming the
    file) or FileExistsError; OUT is then not created."""
    maps_dir, out = Path(maps_dir), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"OUT {out} exists and is not empty. Fix: pass a new folder, or "
                              "remove it first")
    files = map_files(maps_dir)
    if clips is not None:
        check_clip_towns(Path(clips), set(files), maps_dir)
    towns, sources = _read_all(files, allow_pickle, progress)
    lane_types, trigger_types = (_vocabulary(towns, a) for a in ("lane_types", "trigger_types"))
    out.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not mkdtemp: the pack gets the umask's mode (mkdtemp's 0700 hides it from others)
    tmp = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir()
    try:
        entries = {}
        for town, tmap in towns.items():
            data = _npz(town_arrays(tmap, lane_types, trigger_types))
            atomic_write_bytes(tmp / f"{town}{SUFFIX}", data)
            entries[town] = {"file": f"{town}{SUFFIX}", "sha256": hashlib.sha256(data).hexdigest(),
                             "lanes": len(tmap.lane_types),
                             "lane_points": int(sum(len(p) for p in tmap.lane_points)),
                             "trigger_volumes": len(tmap.trigger_types), **sources[town]}
        atomic_write_json(tmp / MANIFEST, {
            "format": FORMAT, "version": 1, "dataset": "bench2drive",
            "frame": "right-handed: CARLA's y negated, as prepare_B2D.py's map_infos",
            "lane_types": lane_types, "trigger_types": trigger_types, "towns": entries})
        if out.exists():
            out.rmdir()   # (empty: checked above)
        os.replace(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MapPackReport(out, entries)


__all__ = ["MANIFEST", "MapPackReport", "map_files", "pack_maps", "town_arrays"]
