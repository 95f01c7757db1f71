"""LiDAR: point clouds, float32 (N,3|4) per sample, padded to the batch's longest with a
`lidar_len` count; and the generic bird's-eye-view histogram (`histogram_features`) whose
presets each dataset defines (carla_wds.datasets: `lidar_preset(name)`).

| codec    | stored as                                            | decoded to        |
|----------|------------------------------------------------------|-------------------|
| `points` | float32 .npy (N,3) or (N,4)                          | float32 (N,C)     |
| `laz`    | LASzip, point format 0, scale 1 mm (laspy writes it) | float32 (N,3) xyz |

Sources: carla_garage@1448bed team_code/data_agent.py (the LAZ header), team_code/data.py
(`laspy.read(...).xyz`).
"""
from __future__ import annotations

import io
from typing import Any, ClassVar

import numpy as np

from .. import limits
from ..codecbase import Codec, Data, NpyCodec, SchemaError, npy_header
from ..imagesize import las_point_count
from ..limits import LimitError
from .base import CodecUse, Modality
from .lidar_bev import HistogramPreset, histogram_features
from .pngs import is_bytes



def points_array(value: Any) -> np.ndarray:
    """A point cloud as float32 (N,C), C in (3,4), all finite; SchemaError otherwise."""
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"points do not convert to float32 ({exc}); "
                          "expected a numeric (N,3) or (N,4) array") from exc
    if arr.ndim != 2 or arr.shape[1] not in (3, 4):
        raise SchemaError(f"points have shape {arr.shape}; expected (N,3) xyz or (N,4) xyzi")
    limits.active().check("lidar_points", len(arr), "the points of one LiDAR sweep")
    bad = int((~np.isfinite(arr)).any(axis=1).sum())
    if bad:
        raise SchemaError(f"{bad} of {len(arr)} points are NaN or infinite; "
                          "expected finite coordinates", fix="drop them before packing")
    return np.ascontiguousarray(arr)


def points_problem(points: np.ndarray, columns: int | None = None) -> str | None:
    """Why decoded points cannot be stored (non-finite values, another column count than
    the layout declares), or None."""
    try:
        arr = points_array(points)
    except SchemaError as exc:
        return exc.reason
    except LimitError as exc:
        return str(exc)
    if columns is not None and arr.shape[1] != columns:
        return (f"points have {arr.shape[1]} columns; expected (N,{columns}) "
                f"{'xyzi' if columns == 4 else 'xyz'}, as the layout declares")
    return None


class PointsCodec(NpyCodec):
    """Point clouds as float32 .npy (N,3|4), read with allow_pickle=False like every array."""
    name: ClassVar[str] = "points"

    def encode(self, value: Any) -> bytes:
        if is_bytes(value):
            return bytes(value)
        return super().encode(points_array(value))

    def bound(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """array_bytes, and at most lidar_points rows, from the header before decoding."""
        super().bound(shape, dtype)
        if shape:
            limits.active().check("lidar_points", shape[0], "the rows a points .npy declares")

    def decode(self, data: Data) -> np.ndarray:
        arr = super().decode(data)
        if arr.dtype != np.float32 or arr.ndim != 2 or arr.shape[1] not in (3, 4):
            raise SchemaError(f"points member is {arr.dtype} {arr.shape}; "
                              "expected float32 (N,3) or (N,4)")
        return arr

    def check(self, data: Data) -> str | None:
        problem = super().check(data)   # the header parses, within the limits
        if problem is not None:
            return problem
        shape, _, dtype, _ = npy_header(data)
        if dtype != np.float32 or len(shape) != 2 or shape[1] not in (3, 4):
            return f"points .npy is {dtype} {shape}; expected float32 (N,3) or (N,4)"
        return None

    def check_full(self, data: Data, columns: int | None = None) -> str | None:
        """check() plus what only the values show: NaN or infinite points (the header cannot
        see them), and the column count the layout declares (the loader refuses others)."""
        problem = self.check(data)
        if problem is None:
            problem = points_problem(self.decode(data), columns)
        return problem


# LAS 1.x public header: fixed offsets (ASPRS LAS 1.4 R15, table 3)
_LAS_MIN_HEADER = 227


def encode_laz(points: np.ndarray) -> bytes:
    """LAZ bytes as carla_garage's data_agent.save_sensors writes lidar/NNNN.laz: point format
    0 (xyz only), scale 0.001 m, offset = the frame's per-axis minimum."""
    import laspy   # optional dependency: LAZ clouds only

    xyz = points_array(points)[:, :3].astype(np.float64)
    header = laspy.LasHeader(point_format=0)
    header.offsets = xyz.min(axis=0) if len(xyz) else np.zeros(3)
    header.scales = np.array([0.001, 0.001, 0.001])
    buf = io.BytesIO()
    with laspy.open(buf, mode="w", header=header, do_compress=True, closefd=False) as writer:
        record = laspy.ScaleAwarePointRecord.zeros(len(xyz), header=header)
        record.x, record.y, record.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        writer.write_points(record)
    return buf.getvalue()


class LazCodec(Codec):
    """LAZ point clouds (carla_garage lidar/NNNN.laz), decoded with laspy as its data.py does
    (`.xyz`)."""
    name: ClassVar[str] = "laz"

    def encode(self, value: Any) -> bytes:
        return bytes(value) if is_bytes(value) else encode_laz(value)

    @staticmethod
    def bound(data: Data) -> int:
        """The point count the header declares, refused (LimitError) over lidar_points, or
        when its point records would exceed array_bytes: laspy sizes its buffer from the
        header and decompresses at most that many points, so this bounds the decode."""
        count, record = las_point_count(data)
        lim = limits.active()
        lim.check("lidar_points", count, "the point count a LAZ header declares")
        lim.check("array_bytes", count * record, f"the point data a LAZ header declares "
                  f"({count:,} records of {record} B), in bytes")
        return count

    def decode(self, data: Data) -> np.ndarray:
        import laspy

        try:
            self.bound(data)   # before laspy allocates a buffer of the declared size
            # single-threaded lazrs: its parallel reader starts a rayon pool, and a DataLoader
            # worker forked after that (a num_workers=0 pass first) deadlocks in its first read
            las = laspy.read(io.BytesIO(bytes(data)), laz_backend=laspy.LazBackend.Lazrs)
            return np.ascontiguousarray(las.xyz, dtype=np.float32)
        except LimitError:
            raise
        except Exception as exc:  # noqa: BLE001 - laspy/lazrs raise many kinds on bad data
            raise SchemaError(f"LAZ does not decode ({type(exc).__name__}: {exc}); expected "
                              "a complete LASzip file as laspy writes it",
                              fix="re-pack from the source .laz (laspy + lazrs installed)") from exc

    def check_full(self, data: Data, columns: int | None = None) -> str | None:
        """check() plus a full decode: a corrupt LASzip chunk shows only when decompressed."""
        problem = self.check(data)
        if problem is None:
            try:
                problem = points_problem(self.decode(data), columns)
            except SchemaError as exc:
                problem = exc.reason
        return problem

    def check(self, data: Data) -> str | None:
        head = bytes(data[:_LAS_MIN_HEADER])
        if not head.startswith(b"LASF"):
            return "not a LAS/LAZ file (no LASF signature); expected a LAS/LAZ point cloud (.laz)"
        if len(head) < _LAS_MIN_HEADER:
            return f"LAZ header cut at {len(head)} bytes; expected at least {_LAS_MIN_HEADER}"
        major, minor = head[24], head[25]
        header_size = int.from_bytes(head[94:96], "little")
        point_offset = int.from_bytes(head[96:100], "little")
        fmt = head[104] & 0x3F   # LAZ sets bits 7 (and 6) of the format byte
        if major != 1 or minor > 4 or header_size < _LAS_MIN_HEADER or fmt > 10:
            return (f"LAS header not sane (version {major}.{minor}, header {header_size} B, "
                    f"point format {fmt}); expected LAS 1.0-1.4")
        if point_offset + 8 > len(data):
            return (f"LAZ truncated before its point data ({len(data)} bytes, data at "
                    f"{point_offset}); expected a complete .laz file")
        try:
            self.bound(data)
        except LimitError as exc:
            return str(exc)
        if head[104] & 0x80:   # compressed: 8 bytes of chunk-table offset open the point data
            table = int.from_bytes(bytes(data[point_offset:point_offset + 8]), "little",
                                   signed=True)
            if table != -1 and not point_offset + 8 <= table <= len(data) - 8:
                return (f"LAZ truncated (chunk table at byte {table}, file has {len(data)}); "
                        "expected a complete .laz file")
        return None


LIDAR = Modality("lidar", "float32", (None, 4), "m", collate="rows", batch="lidar", checked=True,
                 codecs=(CodecUse("points", "float32", (None, 4), "m"),
                         CodecUse("laz", "float32", (None, 3), "m")),
                 doc="points (B, N_max, C) zero-padded, lidar_len (B,); or a BEV histogram")
KIND_CODECS = (PointsCodec(), LazCodec())

__all__ = ["HistogramPreset", "LIDAR", "LazCodec", "PointsCodec", "encode_laz",
           "histogram_features", "points_array", "points_problem"]
