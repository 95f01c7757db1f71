"""CenterNet training targets as carla_garage computes them in its loader, per sample (run in
the loader's workers by adapter="garage"; garage_model.py).

Formulas (autonomousvision/carla_garage@1448bed): team_code/data.py get_targets, with
team_code/gaussian_target.py gaussian_radius / gaussian2d / gen_gaussian_target (from
MMDetection's CornerNet/CenterNet targets) and team_code/center_net.py angle2class:

- boxes come in the BEV image's pixel frame (bb_vehicle_to_image_system, garage_model.py):
  rows (x_px, y_px, extent_x_px, extent_y_px, yaw, speed, brake, class);
- the feature map is the image scaled by (feat_w / img_w, feat_h / img_h); a box's centre there
  is c = (x, y) * ratio, its cell int(c) (truncation), its extents (ex, ey) * ratio;
- the Gaussian's radius is max(2, int(r)), r the smallest root of CornerNet's three IoU >= 0.1
  cases for a (height=ey, width=ex) box; the kernel exp(-(x^2 + y^2) / (2 sigma^2)) with
  sigma = (2 radius + 1) / 6 in float32, values below eps(float32) * max set to 0, is drawn
  into the box's class plane by an elementwise max, clipped at the map's border;
- at the cell: wh = (ex, ey), offset = c - int(c), yaw class and residual (12 bins centred on
  multiples of 2 pi / 12), velocity = speed, brake = round(brake), pixel_weight = 1 on both
  channels (later boxes overwrite earlier ones in the same cell, as theirs do);
- avg_factor = max(1, number of heatmap cells equal to 1); 1 with no boxes.
"""
from __future__ import annotations

import math

import numpy as np

NUM_CLASSES = 4      # config.py num_bb_classes: car, walker, traffic light, stop sign
NUM_DIR_BINS = 12    # config.py num_dir_bins
MIN_OVERLAP = 0.1    # data.py get_targets: gaussian_radius(..., min_overlap=0.1)


def gaussian_radius(height: float, width: float, min_overlap: float = MIN_OVERLAP) -> float:
    """The largest corner shift keeping IoU >= min_overlap, the smallest of CornerNet's three
    cases (one corner in, both in, both out), each the root of a quadratic a r^2 + b r + c."""
    s, p, o = height + width, height * width, min_overlap
    r1 = (s - math.sqrt(s * s - 4 * p * (1 - o) / (1 + o))) / 2
    r2 = (2 * s - math.sqrt(4 * s * s - 16 * (1 - o) * p)) / 8
    r3 = (-2 * o * s + math.sqrt(4 * o * o * s * s - 16 * o * (o - 1) * p)) / (8 * o)
    return min(r1, r2, r3)


def gaussian_kernel(radius: int) -> np.ndarray:
    """(2r+1, 2r+1) float32 Gaussian with sigma = (2r+1)/6; tiny values (< eps * max) are 0."""
    axis = np.arange(-radius, radius + 1, dtype=np.float32)
    sigma = (2 * radius + 1) / 6
    kernel = np.exp(-(axis[None, :] ** 2 + axis[:, None] ** 2) / (2 * sigma * sigma))
    kernel[kernel < np.finfo(np.float32).eps * kernel.max()] = 0
    return kernel


def draw_gaussian(plane: np.ndarray, cx: int, cy: int, radius: int) -> None:
    """Elementwise max of the kernel centred at (cx, cy) into `plane` (H, W), in place."""
    h, w = plane.shape
    kernel = gaussian_kernel(radius)
    left, right = min(cx, radius), min(w - cx, radius + 1)
    top, bottom = min(cy, radius), min(h - cy, radius + 1)
    window = plane[cy - top:cy + bottom, cx - left:cx + right]
    np.maximum(window, kernel[radius - top:radius + bottom, radius - left:radius + right],
               out=window)


def angle_class(angle: float, bins: int = NUM_DIR_BINS) -> tuple[int, float]:
    """Bin index of `angle` (bins centred on k * 2pi/bins) and its residual from the centre."""
    width = 2 * np.pi / float(bins)
    shifted = (angle % (2 * np.pi) + width / 2) % (2 * np.pi)
    cls = shifted // width
    return int(cls), shifted - (cls * width + width / 2)


def _empty(feat_h: int, feat_w: int, num_classes: int) -> dict[str, np.ndarray]:
    return {"center_heatmap": np.zeros((num_classes, feat_h, feat_w), np.float32),
            "wh": np.zeros((2, feat_h, feat_w), np.float32),
            "yaw_class": np.zeros((feat_h, feat_w), np.int32),
            "yaw_res": np.zeros((1, feat_h, feat_w), np.float32),
            "offset": np.zeros((2, feat_h, feat_w), np.float32),
            "velocity": np.zeros((1, feat_h, feat_w), np.float32),
            "brake_target": np.zeros((feat_h, feat_w), np.int32),
            "pixel_weight": np.zeros((2, feat_h, feat_w), np.float32)}


def centernet_targets(boxes: np.ndarray, feat_h: int, feat_w: int, img_h: int, img_w: int,
                      num_classes: int = NUM_CLASSES, skip_outside: bool = False
                      ) -> tuple[dict[str, np.ndarray], int]:
    """The targets (module docstring) of (N, 8) pixel-frame boxes, and avg_factor. Keys are
    those carla_garage's loader returns them under; yaw_class and brake_target (H, W) int32.
    num_classes: the heatmap's planes (LEAD: 8); skip_outside: a box whose cell is off the
    map is left out (LEAD's get_centernet_labels; garage's filter keeps none there)."""
    t = _empty(feat_h, feat_w, num_classes)
    if len(boxes) == 0:
        return t, 1
    rw, rh = float(feat_w / img_w), float(feat_h / img_h)
    for box in np.asarray(boxes, np.float64):
        cx, cy = box[0] * rw, box[1] * rh
        ix, iy = int(cx), int(cy)
        if skip_outside and not (0 <= ix < feat_w and 0 <= iy < feat_h):
            continue
        ex, ey = box[2] * rw, box[3] * rh
        radius = max(2, int(gaussian_radius(ey, ex)))
        draw_gaussian(t["center_heatmap"][int(box[7])], ix, iy, radius)
        t["wh"][:, iy, ix] = (ex, ey)
        t["yaw_class"][iy, ix], t["yaw_res"][0, iy, ix] = angle_class(box[4])
        t["velocity"][0, iy, ix] = box[5]
        t["brake_target"][iy, ix] = int(round(box[6]))
        t["offset"][:, iy, ix] = (cx - ix, cy - iy)
        t["pixel_weight"][:, iy, ix] = 1.0
    return t, max(1, int(np.equal(t["center_heatmap"], 1).sum()))
