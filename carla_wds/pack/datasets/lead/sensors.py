"""LEAD's per-frame sensor files -> carla-wds members (kesai-labs/lead@44891760
lead/expert/expert_data.py _save_sensors_sync, l.917-1098), each read under the limits.

- rgb/, rgb_perturbated/ NNNN.jpg: the cameras side by side (base_agent.py l.230-240); cut
  at multiples of the strip width / camera count into `<camera>.<fmt>` and
  `<camera>_augmented.<fmt>` (the twin).
- semantics/ NNNN.png: uint8 class ids, stitched the same way -> `semantic_<camera>.png`.
- depth/ NNNN.png: 8-bit depth at 1/4 size, stitched -> `depth_<camera>.png` (depth_lead8).
- instance/ NNNN.png (debug runs only): RGB of (tag, G, B) written by cv2 -> per camera in
  the instance codec's BGRA PNG.
- hdmap/ NNNN.png: the BEV map, uint8 ids -> `hdmap.png` (bev_classes), bytes kept.
- lidar/ NNNN.laz: xyz plus the extra dimension `time` (the accumulation step, uint8) ->
  `lidar.npy` float32 (N, 4): x, y, z, time; LEAD's loader keeps time < its used steps.
- radar/ NNNN.npz: np.savez_compressed(radar1=..., radar4=...) of float16 rows ->
  `radar.npy` float32 (N, C + 1), the last column the sensor number 1..4.
"""
from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np

from .... import limits
from ....codecs import codec_named
from ....modalities.pngs import imdecode, imencode

RADARS = ("radar1", "radar2", "radar3", "radar4")


def split(img: np.ndarray, n: int, what: str) -> list[np.ndarray]:
    """A strip of n images side by side -> the n images, left to right (exact slices)."""
    w = img.shape[1]
    if n < 1 or w % n:
        raise ValueError(f"{what} strip is {w} px wide; expected a multiple of {n} (one "
                         f"image per camera)")
    step = w // n
    return [np.ascontiguousarray(img[:, k * step:(k + 1) * step]) for k in range(n)]


def strip_rgb(data: bytes, source_ext: str, n: int, what: str) -> list[np.ndarray]:
    """The RGB cameras of one encoded strip (checked and bounded by the image codec)."""
    codec = codec_named(source_ext)
    problem = codec.check(data)
    if problem:
        raise ValueError(problem)
    return split(codec.decode(data), n, what)


def strip_gray(data: bytes, n: int, what: str) -> list[np.ndarray]:
    return split(imdecode(data, what, 1), n, what)


def gray_pngs(data: bytes, n: int, what: str) -> list[bytes]:
    """A gray strip PNG -> one PNG per camera holding exactly its pixels."""
    return [imencode(part, what) for part in strip_gray(data, n, what)]


def instance_pngs(data: bytes, n: int) -> list[bytes]:
    """LEAD's instance strip (cv2.imwrite of an RGB array: pixel channels tag, G, B) -> per
    camera the instance codec's BGRA PNG (B, G, tag, 255), which decodes to (tag, G, B)."""
    parts = split(imdecode(data, "instance", 3), n, "instance")
    out = []
    for p in parts:
        alpha = np.full(p.shape[:2] + (1,), 255, np.uint8)
        out.append(codec_named("instance").encode(np.concatenate([p[..., ::-1], alpha], 2)))
    return out


def lidar_points(data: bytes) -> np.ndarray:
    """A LEAD .laz -> float32 (N, 4): x, y, z and its `time` dimension."""
    import laspy

    laz = codec_named("laz")
    problem = laz.check(data)   # header, truncation and the limits, before laspy allocates
    if problem:
        raise ValueError(problem)
    try:
        las = laspy.read(io.BytesIO(data), laz_backend=laspy.LazBackend.Lazrs)
        xyz = np.asarray(las.xyz, np.float64)
        time = np.asarray(las["time"], np.float64)
    except Exception as exc:  # noqa: BLE001 - laspy/lazrs raise many kinds on bad data
        raise ValueError(f"LAZ does not decode with a `time` dimension ({type(exc).__name__}: "
                         f"{exc}); expected LEAD's lidar/NNNN.laz") from None
    points = np.concatenate([xyz, time[:, None]], axis=1).astype(np.float32)
    if not np.isfinite(points).all():
        raise ValueError("LAZ holds non-finite points; expected finite metres")
    return points


def _npz_arrays(data: bytes, names: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    """The named members of an np.savez file (all when names is None), never unpickled: each
    member's unpacked size is bounded by array_bytes before it is read."""
    lim = limits.active()
    out: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = {i.filename[:-4]: i for i in z.infolist() if i.filename.endswith(".npy")}
            for name in names if names is not None else sorted(infos):
                if name not in infos:
                    raise ValueError(f".npz lacks {name}.npy (holds {sorted(infos)})")
                lim.check("array_bytes", infos[name].file_size, f"the .npz member {name}.npy, "
                          "unpacked, in bytes")
                with z.open(infos[name]) as member:
                    out[name] = np.load(io.BytesIO(member.read(infos[name].file_size + 1)),
                                        allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
        raise ValueError(f"not a readable .npz ({type(exc).__name__}: {exc}); expected "
                         "np.savez_compressed's file (a truncated file: re-download it)") from None
    return out


def radar_rows(data: bytes) -> np.ndarray:
    """radar/NNNN.npz -> float32 (N, C + 1): every sensor's rows, then its number."""
    arrays = _npz_arrays(data, RADARS)
    parts = []
    for k, name in enumerate(RADARS, 1):
        a = np.asarray(arrays[name], np.float32)
        if a.ndim != 2:
            raise ValueError(f"{name} is {a.shape}; expected (N, C) rows")
        parts.append(np.concatenate([a, np.full((len(a), 1), k, np.float32)], axis=1))
    widths = {p.shape[1] for p in parts}
    if len(widths) != 1:
        raise ValueError(f"radar sensors have {sorted(w - 1 for w in widths)} columns; "
                         "expected the same for all four")
    return np.concatenate(parts)


def camera_pc(data: bytes) -> np.ndarray:
    """camera_pc/NNNN.npz (np.savez_compressed of one array: arr_0) -> float32 (N, C)."""
    arr = np.asarray(_npz_arrays(data, ("arr_0",))["arr_0"], np.float32)
    if arr.ndim != 2:
        raise ValueError(f"camera_pc is {arr.shape}; expected (N, C) rows")
    return arr


def npy(value: Any) -> bytes:
    return codec_named("npy").encode(np.asarray(value))


__all__ = ["RADARS", "camera_pc", "gray_pngs", "instance_pngs", "lidar_points", "npy",
           "radar_rows", "split", "strip_gray", "strip_rgb"]
