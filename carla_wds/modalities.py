"""Codecs for the non-camera modalities of the TransFuser 2022 and carla_garage datasets.

Every codec passes the source file's bytes through unchanged on encode (the packer never
re-encodes what the expert wrote) and encodes arrays only for synthetic writers and tests.
`check` is cheap (headers and trailers only) and catches truncation and the wrong kind of
file, e.g. a garage 8-bit depth PNG stored where a TransFuser 24-bit one is expected.

| codec           | stored as                                          | decoded to                       |
|-----------------|----------------------------------------------------|----------------------------------|
| `depth_carla24` | 8-bit RGB PNG, CARLA 24-bit depth (TF2022 depth/)  | float32 (H,W) metres, 0..1000    |
| `depth_garage8` | 8-bit gray PNG, round(min(d,50 m)/50*255) (garage) | float32 (H,W) metres, 0..50      |
| `semantics`     | 8-bit gray PNG of CARLA class ids                  | uint8 (H,W)                      |
| `bev_tf2022`    | 8-bit RGB PNG, 15 planes bit-packed (topdown/)     | uint8 (15,H,W) 0/1 planes        |
| `bev_classes`   | 8-bit gray PNG of BEV class ids (bev_semantics/)   | uint8 (1,H,W)                    |
| `points`        | float32 .npy (N,3) or (N,4)                        | float32 (N,C)                    |
| `laz`           | LASzip, point format 0, scale 1 mm (garage lidar/) | float32 (N,3) xyz                |

Sources: transfuser@22b3ccd team_code_autopilot/data_agent.py save_sensors (depth and topdown
writing), team_code_autopilot/utils/map_utils.py encode_npy_to_pil, team_code_transfuser/data.py
get_depth/decode_pil_to_npy; carla_garage@1448bed team_code/data_agent.py (depth at 8 bit,
LAZ header), team_code/transfuser_utils.py convert_depth, team_code/data.py (depth / 255).
"""
from __future__ import annotations

import io
from typing import Any, ClassVar

import cv2
import numpy as np

from . import limits
from .codecs import (Codec, Data, NpyCodec, PngCodec, SchemaError, bounded_image, npy_header,
                     register)
from .imagesize import las_point_count
from .limits import LimitError

_PNG = PngCodec()
_DEPTH24_SCALE = 1000.0 / (2 ** 24 - 1)     # CARLA: normalised 24-bit depth times 1000 m
_GARAGE_DEPTH_MAX = 50.0                     # garage clips at 0.05 normalised = 50 m
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}   # PNG colour type -> channel count
_BEV_PLANES = 15                             # encode_npy_to_pil: 5 bits in each of R, G, B


def _is_bytes(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview))


def _png_problem(data: Data, colour_type: int, expected: str) -> str | None:
    """Whole PNG (signature, IHDR, IEND) of 8 bits per channel and the given colour type."""
    problem = _PNG.check(data)
    if problem is not None or len(data) < 26:
        return problem or "not a PNG (too short for an IHDR); expected a PNG file"
    depth, ctype = data[24], data[25]
    if ctype != colour_type:
        if ctype == 3:
            have = "a palette (colour type 3)"
        else:
            n = _CHANNELS.get(ctype)
            have = f"{n} channel{'s' if n != 1 else ''}" if n else f"colour type {ctype}"
        return f"PNG has {have}; expected {expected}"
    if depth != 8:
        return f"PNG has {depth}-bit samples; expected {expected} at 8 bits"
    return None


def _imdecode(data: Data, what: str, channels: int) -> np.ndarray:
    """8-bit pixels of exactly `channels` channels: a BGRA file where BGR is expected is
    refused, not read with its alpha silently dropped. The header's size is bounded first."""
    bounded_image(data)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    have = None if img is None else (1 if img.ndim == 2 else img.shape[2])
    if img is None or img.dtype != np.uint8 or have != channels:
        shape = None if img is None else f"{img.dtype} {img.shape}"
        raise SchemaError(f"{what} PNG does not decode to 8-bit pixels of {channels} "
                          f"channel{'s' if channels > 1 else ''} ({shape})",
                          fix="re-pack from the source PNG")
    return img


def _imencode(img: np.ndarray, what: str) -> bytes:
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(img))
    if not ok:
        raise SchemaError(f"cv2 could not encode a {what} PNG")
    return buf.tobytes()


def depth_metres(value: Any) -> np.ndarray:
    """A depth array to encode as float64 (H,W) metres, all finite; SchemaError otherwise."""
    metres = np.asarray(value, np.float64)
    if metres.ndim != 2 or not np.isfinite(metres).all():
        raise SchemaError(f"depth array has shape {metres.shape} or non-finite values; "
                          "expected finite float (H,W) metres")
    return metres


def _gray_u8(value: Any, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 3 and arr.shape[0] == 1:   # bev_classes arrays come as (1,H,W)
        arr = arr[0]
    if arr.ndim != 2 or arr.dtype != np.uint8:
        raise SchemaError(f"{what} array is {arr.dtype} {arr.shape}; expected uint8 (H,W)")
    return arr


class DepthCarla24Codec(Codec):
    """TransFuser 2022 depth/NNNN.png. The agent swaps CARLA's BGR to RGB once before
    cv2.imwrite, so the file's red channel holds the high byte and cv2.imdecode's BGR array is
    CARLA's own (R, G, B) order: metres = (c0 + 256 c1 + 65536 c2) / (2^24 - 1) * 1000, which
    is what data.py computes after its own BGR2RGB with weights [65536, 256, 1]."""
    name: ClassVar[str] = "depth_carla24"
    interpolation: ClassVar[int] = cv2.INTER_LINEAR

    def encode(self, value: Any) -> bytes:
        if _is_bytes(value):
            return bytes(value)
        metres = depth_metres(value)
        code = np.rint(np.clip(metres / _DEPTH24_SCALE, 0, 2 ** 24 - 1)).astype(np.uint32)
        bgr = np.stack([code & 255, (code >> 8) & 255, code >> 16], -1).astype(np.uint8)
        return _imencode(bgr, "depth")

    def decode(self, data: Data) -> np.ndarray:
        c = _imdecode(data, "depth", 3).astype(np.float32)
        code = c[..., 0] + 256.0 * c[..., 1] + 65536.0 * c[..., 2]   # exact in float32 (< 2^24)
        return code * np.float32(_DEPTH24_SCALE)

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 2, "3-channel 24-bit CARLA depth")
        return problem and problem.replace("PNG has", "depth PNG has", 1)


class DepthGarage8Codec(Codec):
    """carla_garage depth/NNNN.png: uint8 = round(convert_depth(d) * 255) with convert_depth
    = min(d_norm, 0.05) * 20, so metres = v / 255 * 50 (data.py divides by 255 for [0,1])."""
    name: ClassVar[str] = "depth_garage8"
    interpolation: ClassVar[int] = cv2.INTER_LINEAR

    def encode(self, value: Any) -> bytes:
        if _is_bytes(value):
            return bytes(value)
        metres = depth_metres(value)
        # as data_agent.py: (x * 255 + 0.5).astype(uint8) on the clipped [0,1] depth
        v = (np.clip(metres / _GARAGE_DEPTH_MAX, 0, 1) * 255.0 + 0.5).astype(np.uint8)
        return _imencode(v, "depth")

    def decode(self, data: Data) -> np.ndarray:
        v = _imdecode(data, "depth", 1)
        return v.astype(np.float32) * np.float32(_GARAGE_DEPTH_MAX / 255.0)

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 0, "1-channel 8-bit garage depth")
        return problem and problem.replace("PNG has", "depth PNG has", 1)


class SemanticsCodec(Codec):
    """Camera semantics: CARLA class ids as an 8-bit gray PNG (both projects)."""
    name: ClassVar[str] = "semantics"
    interpolation: ClassVar[int] = cv2.INTER_NEAREST   # class ids must never be blended

    def encode(self, value: Any) -> bytes:
        return bytes(value) if _is_bytes(value) else _imencode(_gray_u8(value, "semantics"),
                                                               "semantics")

    def decode(self, data: Data) -> np.ndarray:
        return _imdecode(data, "semantics", 1)

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 0, "1-channel 8-bit class ids")
        return problem and problem.replace("PNG has", "semantics PNG has", 1)


class BevClassesCodec(SemanticsCodec):
    """carla_garage bev_semantics/NNNN.png: BEV class ids 0-10, decoded as one plane (1,H,W)."""
    name: ClassVar[str] = "bev_classes"

    def decode(self, data: Data) -> np.ndarray:
        return _imdecode(data, "BEV classes", 1)[None]

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 0, "1-channel 8-bit BEV class ids")
        return problem and problem.replace("PNG has", "BEV classes PNG has", 1)


def pack_bev_tf2022(planes: np.ndarray) -> np.ndarray:
    """encode_npy_to_pil: plane i of 0-4 into bit 7-i of R, 5-9 of G, 10-14 of B; (3,H,W)."""
    bev = np.ceil(np.asarray(planes)).astype(np.uint8)   # the project's own np.ceil
    img = np.zeros((3,) + bev.shape[1:], np.uint8)
    for i in range(min(bev.shape[0], _BEV_PLANES)):
        img[i // 5] |= (bev[i] << (7 - i % 5)).astype(np.uint8)
    return img


class BevTf2022Codec(Codec):
    """TransFuser 2022 topdown/encoded_NNNN.png: the planes packed by encode_npy_to_pil, written
    with cv2.imwrite(moveaxis(img, 0, 2)), so cv2's BGR array is (R, G, B) of the packing and
    data.py's BGR2RGB reverses them: its decode_pil_to_npy planes 10:12 are planes 0:2 here
    (road, lane). Decode gives all 15 planes in encode_npy_to_pil's order."""
    name: ClassVar[str] = "bev_tf2022"
    interpolation: ClassVar[int] = cv2.INTER_NEAREST

    def encode(self, value: Any) -> bytes:
        if _is_bytes(value):
            return bytes(value)
        arr = np.asarray(value)
        if arr.ndim != 3 or not 1 <= arr.shape[0] <= _BEV_PLANES:
            raise SchemaError(f"BEV array has shape {arr.shape}; expected (C<=15,H,W) planes")
        if not np.isin(np.ceil(arr), (0, 1)).all():
            raise SchemaError("BEV planes hold values outside [0, 1]; expected 0/1 masks")
        return _imencode(np.moveaxis(pack_bev_tf2022(arr), 0, 2), "BEV")

    def decode(self, data: Data) -> np.ndarray:
        packed = _imdecode(data, "BEV", 3)                    # (H, W, 3): bytes of R, G, B
        bits = np.arange(7, 2, -1, dtype=np.uint8)            # bit 7-i for plane i of a byte
        planes = (packed[None, :, :, :] >> bits[:, None, None, None]) & 1   # (5, H, W, 3)
        return np.ascontiguousarray(np.moveaxis(planes, 3, 0).reshape((15,) + packed.shape[:2]))

    def check(self, data: Data) -> str | None:
        problem = _png_problem(data, 2, "3-channel bit-packed TransFuser BEV")
        return problem and problem.replace("PNG has", "BEV PNG has", 1)


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
        if _is_bytes(value):
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
    import laspy   # optional dependency of the garage layout only

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
    """carla_garage lidar/NNNN.laz, decoded with laspy as its data.py does (`.xyz`)."""
    name: ClassVar[str] = "laz"

    def encode(self, value: Any) -> bytes:
        return bytes(value) if _is_bytes(value) else encode_laz(value)

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
            return "not a LAS/LAZ file (no LASF signature); expected carla_garage's .laz"
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


for _codec in (DepthCarla24Codec(), DepthGarage8Codec(), SemanticsCodec(), BevTf2022Codec(),
               BevClassesCodec(), PointsCodec(), LazCodec()):
    register(_codec)

__all__ = ["BevClassesCodec", "BevTf2022Codec", "DepthCarla24Codec", "DepthGarage8Codec",
           "LazCodec", "PointsCodec", "SemanticsCodec", "depth_metres", "encode_laz",
           "pack_bev_tf2022", "points_array", "points_problem"]

# Bench2Drive's codecs build on these helpers, so they register once this module is complete
# (whichever of codecs, modalities or modalities_b2d is imported first).
from . import modalities_b2d as _modalities_b2d  # noqa: E402,F401
