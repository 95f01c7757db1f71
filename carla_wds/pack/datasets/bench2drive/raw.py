"""Bench2Drive's binary per-frame files, decoded as untrusted input: the radar `.h5` and the
expert assessment `.npz`. Each decoder checks what the file *declares* (HDF5 dataset shape,
dtype, chunk and storage; zip member size and .npy header) against `carla_wds.limits` before
it reads a byte of array data, and refuses every feature the real files never use.

HDF5 can keep a dataset's bytes in another file (external storage), point a name at another
file (external links) or at another dataset (soft links), assemble a dataset from other files
(virtual datasets), and load a filter plugin from disk for an unknown filter id. Any of those
would let a radar file read what is on the packing machine into the shards, so all are
refused from the file's metadata, before any link is followed or any data is read. The file
is opened from memory (h5py's file-object driver over the bytes already read) and only
hard-linked datasets filtered with gzip and shuffle (what Bench2Drive writes) are read.
"""
from __future__ import annotations

import io
import math
import zipfile
import zlib

import numpy as np

from .... import limits
from ....datasets.bench2drive import RIG

RADARS = RIG.radars

# the filters a Bench2Drive radar file may use (data_collect.py writes gzip; shuffle goes
# with it); every other id is refused before HDF5 could look for a plugin to load for it
_ALLOWED_FILTERS = {1: "gzip", 2: "shuffle"}
_FILTER_NAMES = {3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset", 32000: "lzf",
                 32001: "blosc", 32004: "lz4", 32008: "bitshuffle", 32015: "zstd"}
_LINKS = {1: "a soft link", 64: "an external link"}
_OUTSIDE = "expected a dataset stored in the file itself (links, external storage, virtual " \
           "datasets and filters other than gzip and shuffle are refused)"


def radar_array(data: bytes) -> np.ndarray:
    """A radar .h5 -> (M, 5) float32 [radar index (RADARS order), depth, altitude, azimuth,
    velocity]. The column order is CARLA's RadarDetection (velocity, azimuth, altitude, depth)
    reversed by Bench2Drive's np.flip; the comment in its sensor_interface.py says otherwise.
    ValueError (LimitError for a size over a limit) names the dataset and what was expected."""
    import h5py   # only when radar is selected
    try:
        with h5py.File(io.BytesIO(data), "r") as f:
            names = sorted(f.keys())    # link names only: nothing is followed yet
            if names != sorted(RADARS):
                raise ValueError(f"radar h5 holds datasets {names}; expected {list(RADARS)}")
            datasets = [_radar_dataset(h5py, f, name) for name in RADARS]
            rows = sum(ds.shape[0] for ds in datasets)
            lim = limits.active()
            lim.check("radar_rows", rows, "radar detections declared by the h5's datasets")
            lim.check("array_bytes", rows * 5 * 4, "radar (M, 5) float32 array, in bytes")
            parts = [np.c_[np.full(ds.shape[0], i, np.float32), _values(ds, RADARS[i])]
                     for i, ds in enumerate(datasets)]
    except (OSError, KeyError, TypeError, RuntimeError) as exc:
        raise ValueError(f"not a readable HDF5 file ({_one_line(exc)}); expected Bench2Drive's "
                         "radar .h5") from None
    return np.concatenate(parts).astype(np.float32)


def _radar_dataset(h5py, f, name: str):
    """The dataset `name` once its link, kind, storage, filters, dtype and declared sizes are
    known to be safe to read; ValueError naming what it is instead."""
    kind = f.id.links.get_info(name.encode()).type
    if kind != h5py.h5l.TYPE_HARD:
        raise ValueError(f"radar dataset {name} is {_LINKS.get(kind, 'a user-defined link')}; "
                         f"{_OUTSIDE}")
    obj = f.get(name)    # a hard link: an object in this file; opening it reads no data
    if not isinstance(obj, h5py.Dataset):
        what = "a group" if isinstance(obj, h5py.Group) else f"a {type(obj).__name__}"
        raise ValueError(f"radar dataset {name} is {what}; expected a numeric (M, 4) array")
    dcpl = obj.id.get_create_plist()
    if dcpl.get_layout() == h5py.h5d.VIRTUAL:
        raise ValueError(f"radar dataset {name} is a virtual dataset; {_OUTSIDE}")
    if dcpl.get_external_count():
        raise ValueError(f"radar dataset {name} uses external storage; {_OUTSIDE}")
    for i in range(dcpl.get_nfilters()):
        code = dcpl.get_filter(i)[0]
        if code not in _ALLOWED_FILTERS:
            raise ValueError(f"radar dataset {name} uses filter "
                             f"{_FILTER_NAMES.get(code, f'id {code}')}; {_OUTSIDE}")
    dtype, shape = obj.dtype, obj.shape
    if dtype.kind not in "fiu" or dtype.itemsize > 8 or len(shape or ()) != 2 or shape[1] != 4:
        raise ValueError(f"radar dataset {name} is {dtype} {shape}; expected a numeric "
                         "(M, 4) array")
    lim, size = limits.active(), dtype.itemsize
    lim.check("radar_rows", shape[0], f"rows of radar dataset {name}")
    lim.check("array_bytes", shape[0] * 4 * size, f"radar dataset {name} {shape}, in bytes")
    if obj.chunks:    # a chunk is decompressed whole, however few rows the dataset declares
        lim.check("array_bytes", math.prod(obj.chunks) * size,
                  f"one chunk {obj.chunks} of radar dataset {name}, in bytes")
    return obj


def _values(ds, name: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):   # an overflow is refused just below
        arr = np.asarray(ds[()], np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"radar dataset {name} holds values that are not finite in float32; "
                         "expected detections in m, rad and m/s")
    return arr


def npz_array(data: bytes) -> np.ndarray:
    """arr_0 of an np.savez file as a flat numeric array, never unpickled. The member's size
    (zip directory) and the .npy header's shape and dtype are checked against `array_bytes`
    before anything is read; the read is bounded by them and reaches the member's end, so
    zipfile checks its CRC. ValueError (LimitError) says what was expected."""
    lim = limits.active()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            info = _npz_member(z)
            lim.check("array_bytes", info.file_size, "the .npz member arr_0.npy, unpacked, "
                      "in bytes")
            with z.open(info) as member:
                dtype, shape, order = _npy_header(member)
                need = math.prod(shape) * dtype.itemsize
                lim.check("array_bytes", need, f"the array arr_0.npy declares ({dtype} "
                          f"{shape}), in bytes")
                body = member.read(need + 1)   # the member's end: zipfile checks the CRC
            if len(body) != need:
                raise ValueError(f"arr_0.npy declares {dtype} {shape} ({need:,} bytes) but "
                                 f"holds {len(body):,} bytes of data")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
            RuntimeError) as exc:
        raise ValueError(f"not a readable .npz ({_one_line(exc)}); expected np.savez's arr_0 "
                         "(a truncated or corrupt file: re-download it)") from None
    return np.frombuffer(body, dtype).reshape(shape, order=order).reshape(-1)


def _npz_member(z: zipfile.ZipFile) -> zipfile.ZipInfo:
    try:
        info = z.getinfo("arr_0.npy")
    except KeyError:
        raise ValueError(f"holds {z.namelist()[:5]}; expected np.savez's arr_0") from None
    if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED,
                                                          zipfile.ZIP_DEFLATED):
        raise ValueError("arr_0.npy is encrypted or compressed with method "
                         f"{info.compress_type}; expected np.savez's stored or deflated member")
    return info


def _npy_header(fp) -> tuple[np.dtype, tuple[int, ...], str]:
    """(dtype, shape, order) from an .npy header (numpy's own bounded header parser)."""
    fmt = np.lib.format
    version = fmt.read_magic(fp)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"arr_0.npy is .npy format {version}; expected 1.0 or 2.0")
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    try:
        shape, fortran, dtype = read(fp)
    except ValueError as exc:   # numpy's text may quote the header over several lines
        raise ValueError(f"arr_0.npy has no valid .npy header ({_one_line(exc)})") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise ValueError(f"arr_0.npy holds {dtype}; expected numbers")
    if any(d < 0 for d in shape):   # (-2, -2) multiplies out positive
        raise ValueError(f"arr_0.npy's header has a negative dimension {shape}")
    return dtype, tuple(shape), "F" if fortran else "C"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


__all__ = ["npz_array", "radar_array"]
