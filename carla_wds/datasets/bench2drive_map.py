"""Bench2Drive's HD map as VAD sees it per frame: the map instances around the ego, in VAD's
LiDAR frame, clipped to its range and resampled to its fixed number of points, with its class
labels. The loader's map stage (load/stream/mappack.py) calls `vad_vectors` per sample with the
town's arrays from a `carla-wds pack-map` pack (already in prepare_B2D.py's right-handed world:
CARLA's y negated).

Every number and rule is Bench2DriveZoo@10a2e5d's (written here from their formulas):
- classes: B2D_vad_dataset.py l.57 `map_element_class` {Broken: 0, Solid: 1, SolidSolid: 2,
  Center: 3, TrafficLight: 4, StopSign: 5}; other types are dropped (l.273, l.287).
- range: adzoo/vad/configs/VAD/VAD_base_e2e_b2d.py l.9 point_cloud_range
  [-15, -30, -2, 15, 30, 2], passed to the dataset at l.500; fixed points: l.131
  map_fixed_ptsnum_per_gt_line = 20, passed as polyline_points_num at l.501.
- frame: world2lidar = lefthand_ego_to_lidar @ anno world2lidar @ left2right (prepare_B2D.py
  l.252); anno world2lidar is inv(lidar2ego) @ world2ego with Bench2Drive's LiDAR at
  (-0.39, 0, 1.84) unrotated, so here world2lidar = E @ inv(M) @ inv(ego2world) @ L with
  ego2world the pack's `ego2world` (CARLA's left-handed world). The result: x to the right,
  y forward, metres from the LiDAR.
- lanes (B2D_vad_dataset.py get_map_info l.245-284): a lane is a candidate when one of its
  sample points (prepare_B2D.py l.175-182: every 50th point and the last) lies within 50 m
  (l.262, strict <) of the LiDAR's world (x, y) (inv(world2lidar)[0:2, 3], l.261); its points
  are taken to the LiDAR frame and those strictly inside the range in x and y kept (l.277-279:
  points outside are dropped, not cut at the border); kept with >= 2 points.
- trigger volumes (l.285-297): every one, kept only when all its points are inside the range,
  closed by repeating its first point.
- resampling (map_utils/struct.py LiDARInstanceLines.fixed_num_sampled_points l.76-93): 20
  points at equal arc length from start to end (shapely's interpolate), float32, x clamped to
  +-15 and y to +-30 (patch_size (60, 30), l.299 and struct.py l.23-24).
Order: lanes in the pack's order, then trigger volumes, as theirs.

UniAD's lane GT (B2D_e2e_dataset.py get_map_info l.290-366) selects the same way with its own
numbers: lanes within 100 m (l.309), range [-51.2, -51.2, -5, 51.2, 51.2, 3] and patch
(102.4, 102.4) (adzoo/uniad/configs/stage2_e2e/base_e2e_b2d.py l.9, l.11, given at l.751 and
l.757), BEV (200, 200) (B2D_e2e_dataset.py l.30, fixed); each instance's points become pixels
(p + patch / 2) * bev / patch truncated to int32 (l.329-330), a lane drawn with cv2.polylines
(open, thickness 2, l.331), a volume filled with cv2.fillConvexPoly (l.351); its box is the
mask's (min x, min y, max x, max y) (l.335-336); no instance: one zero mask labelled -1 with
box (0, 0, 0, 0) (l.358-361).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import cv2
import numpy as np

from .bench2drive import RIG

VAD_CLASSES = ("Broken", "Solid", "SolidSolid", "Center", "TrafficLight", "StopSign")
VAD_RANGE = (-15.0, -30.0, -2.0, 15.0, 30.0, 2.0)
VAD_FIXED_NUM = 20
VAD_MAX_DISTANCE = 50.0
UNIAD_RANGE = (-51.2, -51.2, -5.0, 51.2, 51.2, 3.0)
UNIAD_PATCH = (102.4, 102.4)
UNIAD_BEV = (200, 200)
UNIAD_MAX_DISTANCE = 100.0
SAMPLE_EVERY = 50
LEFTHAND_EGO_TO_LIDAR = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
                                 np.float64)
LEFT2RIGHT = np.diag([1.0, -1.0, 1.0, 1.0])


@dataclass(frozen=True)
class TownArrays:
    """One town of a map pack: polyline i is points[offsets[i]:offsets[i + 1]], type
    names[type[i]] (the pack's vocabulary)."""
    lane_points: np.ndarray
    lane_offsets: np.ndarray
    lane_types: tuple[str, ...]        # one name per lane
    trigger_points: np.ndarray
    trigger_offsets: np.ndarray
    trigger_types: tuple[str, ...]

    @cached_property
    def lane_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every lane's sample points (x, y) (prepare_B2D.py l.175-182) and the lane each is
        of, computed once per town."""
        off = self.lane_offsets
        idx = [a + sample_point_index(int(b - a)) for a, b in zip(off[:-1], off[1:])]
        owner = np.repeat(np.arange(len(idx)), [len(i) for i in idx])
        flat = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        return self.lane_points[flat, :2], owner


def town_of_key(key: str) -> str:
    """The town of a sample key `<clip>__<frame>`: the clip name's second part
    (prepare_B2D.py l.212 `folder_name.split('_')[1]`)."""
    clip = key.rsplit("__", 1)[0]
    parts = clip.split("_")
    return parts[1] if len(parts) > 1 else ""


def sample_point_index(n: int) -> np.ndarray:
    """prepare_B2D.py l.175-182: indices 0, 50, ... (below n) and n - 1."""
    count = n // SAMPLE_EVERY + (1 if n % SAMPLE_EVERY else 0)
    return np.array([SAMPLE_EVERY * i for i in range(count)] + [n - 1], np.int64)


def world2lidar(ego2world: np.ndarray) -> np.ndarray:
    """VAD's right-handed world -> LiDAR transform from the pack's left-handed ego2world."""
    mount = np.eye(4)
    mount[:3, 3] = RIG.lidar_mount
    lidar2world = np.asarray(ego2world, np.float64) @ mount
    return LEFTHAND_EGO_TO_LIDAR @ np.linalg.inv(lidar2world) @ LEFT2RIGHT


def _in_range(xy: np.ndarray, pc_range: tuple[float, ...]) -> np.ndarray:
    x0, y0, _, x1, y1, _ = pc_range
    return (xy[:, 0] > x0) & (xy[:, 0] < x1) & (xy[:, 1] > y0) & (xy[:, 1] < y1)


def _to_lidar(points: np.ndarray, w2l: np.ndarray) -> np.ndarray:
    return points @ w2l[:3, :3].T + w2l[:3, 3]


def _near_lanes(town: TownArrays, ego_xy: np.ndarray, distances: tuple[float, ...]
                ) -> list[np.ndarray]:
    """Per distance, the lanes with a sample point strictly within it of ego_xy (l.264-268),
    in order; the sample points' distances computed once."""
    samples, owner = town.lane_samples
    d = np.linalg.norm(samples - ego_xy, axis=-1)
    return [np.unique(owner[d < m]) for m in distances]


def _gather(points: np.ndarray, offsets: np.ndarray, which: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The points of polylines `which`, concatenated, and where each starts and ends."""
    lengths = offsets[which + 1] - offsets[which]
    cut = np.concatenate([[0], np.cumsum(lengths)])
    idx = np.repeat(offsets[which] - cut[:-1], lengths) + np.arange(cut[-1])
    return points[idx], cut


Found = list[tuple[np.ndarray, int, bool]]


def resample(line: np.ndarray, num: int = VAD_FIXED_NUM) -> np.ndarray:
    """(n, 2) polyline -> (num, 2) points at equal arc length from its start to its end."""
    return resample_all([line], num)[0]


def resample_all(lines: list[np.ndarray], num: int = VAD_FIXED_NUM) -> np.ndarray:
    """resample of every line at once, (N, num, 2): one np.interp per axis over all the
    lines laid end to end along one arc-length axis, each line's start moved past the
    previous line's end by 1 (no query falls in those gaps)."""
    if not lines:
        return np.zeros((0, num, 2))
    lengths = np.array([len(line) for line in lines])
    pts = np.concatenate(lines)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    seg[first[1:] - 1] = 0.0                       # the joins between lines are not arcs
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    along = arc - np.repeat(arc[first], lengths)   # each line's arc length from its start
    total = along[first + lengths - 1]
    base = np.concatenate([[0.0], np.cumsum(total + 1.0)[:-1]])
    xp = along + np.repeat(base, lengths)
    at = total[:, None] * np.linspace(0.0, 1.0, num)[None] + base[:, None]
    return np.stack([np.interp(at, xp, pts[:, k]) for k in range(2)], axis=-1)


def frame_instances(town: TownArrays, w2l: np.ndarray,
                    ranges: tuple[tuple[tuple[float, ...], float], ...]) -> list[Found]:
    """Per (pc_range, max_distance), the (points in the LiDAR frame (n, 2), class, is a
    trigger volume) of one frame, as both get_map_info select them (VAD l.245-297; UniAD
    B2D_e2e_dataset.py l.290-356). Every lane near enough for any range and every trigger
    volume is moved into the LiDAR frame once, for all the ranges."""
    ego_xy = np.linalg.inv(w2l)[0:2, 3]
    classes = {name: i for i, name in enumerate(VAD_CLASSES)}
    near = _near_lanes(town, ego_xy, tuple(m for _, m in ranges))
    union = np.unique(np.concatenate(near)) if near else np.zeros(0, np.int64)
    lanes, cut = _gather(town.lane_points, town.lane_offsets, union)
    lanes = _to_lidar(lanes, w2l)
    slot = {int(lane): j for j, lane in enumerate(union)}
    off = town.trigger_offsets
    volumes = _to_lidar(town.trigger_points, w2l)
    out = []
    for (pc_range, _), these in zip(ranges, near):
        inside = _in_range(lanes, pc_range)
        # each lane's points in range, kept in one pass and cut by their counts
        counts = np.add.reduceat(inside.astype(np.int64), cut[:-1]) if len(union) else inside
        kept, ends = lanes[inside, :2], np.concatenate([[0], np.cumsum(counts)])
        found: Found = []
        for lane in these.tolist():
            j = slot[lane]
            if counts[j] > 1 and town.lane_types[lane] in classes:
                found.append((kept[ends[j]:ends[j + 1]], classes[town.lane_types[lane]], False))
        inside = _in_range(volumes, pc_range)
        for i, kind in enumerate(town.trigger_types):
            if kind in classes and inside[off[i]:off[i + 1]].all():
                found.append((volumes[off[i]:off[i + 1], :2], classes[kind], True))
        out.append(found)
    return out


def instances(town: TownArrays, w2l: np.ndarray, pc_range: tuple[float, ...],
              max_distance: float) -> Found:
    """frame_instances for one range."""
    return frame_instances(town, w2l, ((pc_range, max_distance),))[0]


def vad_polylines(town: TownArrays, ego2world: np.ndarray,
                  found: Found | None = None) -> tuple[list[np.ndarray], list[int]]:
    """(polylines in VAD's LiDAR frame, their class labels) of one frame, before resampling;
    a trigger volume closed by its first point (l.296)."""
    if found is None:
        found = instances(town, world2lidar(ego2world), VAD_RANGE, VAD_MAX_DISTANCE)
    lines = [np.concatenate([p, p[:1]]) if volume else p for p, _, volume in found]
    return lines, [label for _, label, _ in found]


def vad_vectors(town: TownArrays, ego2world: np.ndarray,
                found: Found | None = None) -> dict[str, np.ndarray]:
    """One frame's VAD map GT: `map_pts` (N, 20, 2) float32 in VAD's LiDAR frame and
    `map_labels` (N,) int64 (VAD_CLASSES' index)."""
    lines, labels = vad_polylines(town, ego2world, found)
    pts = resample_all(lines).astype(np.float32)
    half_x, half_y = (VAD_RANGE[3] - VAD_RANGE[0]) / 2, (VAD_RANGE[4] - VAD_RANGE[1]) / 2
    np.clip(pts[..., 0], -half_x, half_x, out=pts[..., 0])
    np.clip(pts[..., 1], -half_y, half_y, out=pts[..., 1])
    return {"map_pts": pts, "map_labels": np.array(labels, np.int64)}


def uniad_lanes(town: TownArrays, ego2world: np.ndarray,
                found: Found | None = None) -> dict[str, np.ndarray]:
    """One frame's UniAD lane GT (B2D_e2e_dataset.py get_map_info l.290-366):
    `gt_lane_labels` (N,) int64, `gt_lane_bboxes` (N, 4) int64 (x0, y0, x1, y1 pixels),
    `gt_lane_masks` (N, 200, 200) uint8; one empty mask labelled -1 when there is none."""
    if found is None:
        found = instances(town, world2lidar(ego2world), UNIAD_RANGE, UNIAD_MAX_DISTANCE)
    if not found:
        return {"gt_lane_labels": np.array([-1], np.int64),
                "gt_lane_bboxes": np.zeros((1, 4), np.int64),
                "gt_lane_masks": np.zeros((1, *UNIAD_BEV), np.uint8)}
    # drawn in place into one (N, H, W) array; each box from cv2.boundingRect of the 0/1
    # mask, which equals their (xs.min(), ys.min(), xs.max(), ys.max()) of np.where(mask == 1)
    masks = np.zeros((len(found), *UNIAD_BEV), np.uint8)
    boxes = np.zeros((len(found), 4), np.int64)
    scale = np.array(UNIAD_BEV) / np.array(UNIAD_PATCH)
    # every instance's pixels in one pass (the same elementwise operations), then cut
    cut = np.cumsum([0] + [len(pts) for pts, _, _ in found])
    every = ((np.concatenate([pts for pts, _, _ in found]) + np.array(UNIAD_PATCH) / 2)
             * scale).astype(np.int32)
    for j, (_, _, volume) in enumerate(found):
        pixels = every[cut[j]:cut[j + 1]]
        if volume:
            cv2.fillConvexPoly(masks[j], pixels, color=1)
        else:
            cv2.polylines(masks[j], [pixels], False, color=1, thickness=2)
        x, y, w, h = cv2.boundingRect(masks[j])
        if not w:   # nothing drawn: their xs.min() raises here too
            raise ValueError(f"map: a lane drew no pixel on UniAD's {UNIAD_BEV} BEV")
        boxes[j] = (x, y, x + w - 1, y + h - 1)
    return {"gt_lane_labels": np.array([label for _, label, _ in found], np.int64),
            "gt_lane_bboxes": boxes, "gt_lane_masks": masks}


def map_gt(town: TownArrays, ego2world: np.ndarray,
           parts: tuple[str, ...] = ("vad", "uniad")) -> dict[str, np.ndarray]:
    """VAD's map GT and UniAD's lane GT of one frame (the map recipe's arrays; `parts`: which
    of the two), from one move of the frame's map into the LiDAR frame."""
    ranges = {"vad": (VAD_RANGE, VAD_MAX_DISTANCE), "uniad": (UNIAD_RANGE, UNIAD_MAX_DISTANCE)}
    found = dict(zip(parts, frame_instances(town, world2lidar(ego2world),
                                            tuple(ranges[p] for p in parts))))
    out: dict[str, np.ndarray] = {}
    if "vad" in found:
        out.update(vad_vectors(town, ego2world, found["vad"]))
    if "uniad" in found:
        out.update(uniad_lanes(town, ego2world, found["uniad"]))
    return out


__all__ = ["TownArrays", "UNIAD_BEV", "UNIAD_RANGE", "VAD_CLASSES", "VAD_FIXED_NUM",
           "VAD_RANGE", "frame_instances", "instances", "map_gt", "resample", "resample_all", "sample_point_index", "town_of_key",
           "uniad_lanes", "vad_vectors", "world2lidar"]
