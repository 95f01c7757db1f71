"""`verify --deep`'s second line of defence against non-finite labels (issue 38).

Packing refuses NaN and infinite labels, but a shard from elsewhere (or an old one) may hold
them under a matching sha256: the core labels (target point, waypoints, speed) are checked by
schema.validate_sample, and here every other float array a sample stores as `.npy` or as a
measurements record (boxes, poses, tracks, expert features, record fields) is decoded and
checked too. Point clouds (LiDAR, radar) are sensor data, not labels, and are left as stored.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..schema import SampleSpec, decode_member

ARRAY_CODECS = ("npy", "record")
SENSORS = ("lidar", "radar")   # point clouds: sensor data, whose readers drop bad points


def _first_nonfinite(value: Any, field: str = "") -> tuple[int, str] | None:
    """(how many values are NaN or infinite, the first of them and where) in a float array or
    in the float fields of a structured one (a record); None when all are finite."""
    if not isinstance(value, np.ndarray):
        return None
    if value.dtype.names:
        found = [f for n in value.dtype.names
                 if (f := _first_nonfinite(np.asarray(value[n]), f"field {n} ")) is not None]
        return (sum(n for n, _ in found), found[0][1]) if found else None
    if value.dtype.kind not in "fc":
        return None
    mask = ~np.isfinite(value)
    if not mask.any():
        return None
    first = tuple(int(i) for i in np.argwhere(mask)[0])
    return int(mask.sum()), f"the first, {value[first]}, at {field}index {list(first)}"


def nonfinite_labels(spec: SampleSpec, raw: dict[str, Any], where: str) -> list[str]:
    """One problem per label array member of `raw` that holds NaN or inf, naming the sample
    (`where`: shard and key), the member and the first bad value."""
    problems, seen = [], set()
    for e in spec.extras:
        if e.codec not in ARRAY_CODECS or e.modality in SENSORS or e.member in seen or \
                e.member not in raw:
            continue
        seen.add(e.member)   # a twin view (ego2world_rh) shares its member
        found = _first_nonfinite(decode_member(spec, raw, e.member, where))
        if found is not None:
            problems.append(f"{where}: {e.member} holds {found[0]} non-finite value(s) (NaN or "
                            f"inf; {found[1]}); expected finite labels. Fix: re-pack the shard "
                            "with this carla-wds, which refuses such frames")
    return problems


__all__ = ["nonfinite_labels"]
