"""adapter="transfuser2022": the batches of TransFuser 2022's own DataLoader(CARLA_Data) after
torch's default collate (autonomousvision/transfuser@22b3ccd team_code_transfuser/data.py
CARLA_Data.__getitem__ with config.py GlobalConfig as it trains: seq_len 1, pred_len 4,
scale 1, multitask, backbone transFuser, no point pillars). Checked against their loader's output
in tests/load/adapters/test_transfuser2022_model.py (golden: tools/golden/tf2022.py --batches).

Each key from their formulas (config.py values in brackets), in their order:
- rgb: uint8 (3, 160, 704): the 960x160 strip cropped by crop_image_cv2 to img_resolution
  [(160, 704)]: rows H//2 - 80.., columns W//2 - 352 + int(crop_shift)..;
- bev: int64 (160, 160): load_crop_bev_npy of BEV planes 0:2 (their decode_pil_to_npy 10:12):
  rows shifted down by 7, rotated by the augmentation angle (skimage's rotate), cropped at rows
  90..250, columns 170..330, then argmax over (0, plane 0, plane 0 + plane 1);
- depth: float64 (160, 704): their get_depth, the 24-bit code / (2^24 - 1), clipped at 0.05
  and times 20, i.e. min(d, 50 m) / 50 (the code is recovered exactly from the stored metres);
- semantic: uint8 (160, 704): their converter (the pack's class table) on the same crop;
- lidar: float32 (2, 256, 256): lidar_to_histogram_features (carla_wds.datasets.transfuser
  PRESET) of the points after align(), in its arithmetic: for seq_len 1 the augmentation's
  rotation times Tr_vehicle_to_lidar @ inv(M) @ M @ Tr_lidar_to_vehicle (M: the sample's
  ego_matrix, the pack's ego2world member), which rounds points on a bin edge as theirs does;
- label: float32 (20, 7): parse_labels at -rad: each box's (x, y) through
  get_lidar_to_bevimage_transform (8 px/m) and the rotation, clipped to [0, 255], kept when it
  has more than 1 LiDAR point and lies strictly inside (0, 255); (x_px, y_px, width * 8,
  length * 8, yaw - rad, speed, brake); zero rows after the kept boxes;
- ego_waypoint: float64 (4, 2): the pack's waypoints (their formula, virtual-LiDAR frame),
  rotated by the augmentation;
- steer, throttle, speed, theta, x_command, y_command: float64; brake, light: bool;
- target_point: float64 (2,): the pack's target point (their local_command_point), rotated by
  the augmentation (theirs adds rad to theta: the same rotation);
- target_point_image: float64 (1, 256, 256): draw_target_point (cv2.circle, radius 5,
  thickness 3) / 255.
With augment=True (sample["augment"], training only; the loader's colour augmenter stays off:
own_augment): their rotation, drawn with probability 1 - inv_augment_prob
[0.1], degree uniform in +-aug_max_rotation [20], crop_shift = degree / 60 * img_width [320]
/ scale [1]. Their loader has no colour augmentation.
"""
from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from ...datasets.transfuser import PRESET
from ...modalities.boxes import BOX_COLUMNS
from ...modalities.lidar_bev import histogram_features
from .model import ModelAdapter

# config.py values (transfuser@22b3ccd team_code_transfuser/config.py)
IMG_RESOLUTION = (160, 704)
IMG_WIDTH, SCALE, PRED_LEN, MAX_LABELS = 320, 1, 4, 20
INV_AUGMENT_PROB, AUG_MAX_ROTATION = 0.1, 20.0
# data.py constants: load_crop_bev_npy (5 px/m, 32 m, centre 250, the 7-row LiDAR shift),
# get_depth (24-bit code, 50 m = 0.05 of 1000 m), draw_target_point (256 px, 8 px/m, 1.3 m)
BEV_PIXELS, BEV_CENTRE, BEV_SHIFT = 32 * 5, 250, 7
DEPTH_CODES, DEPTH_CLIP, DEPTH_SCALE = 2 ** 24 - 1, 0.05, 20.0
TP_IMAGE, TP_PPM, TP_LIDAR_X = 256, 8.0, 1.3
LABEL_PPM = 8
_C = {name: i for i, name in enumerate(BOX_COLUMNS)}
NEEDS = ("steer", "throttle", "brake", "light_hazard", "theta", "x_command", "y_command")


def crop_start(height: int, width: int, crop_shift: float = 0.0) -> tuple[int, int]:
    """crop_image_cv2 / crop_seg: the crop's top-left corner (centre crop, x shifted)."""
    crop_h, crop_w = IMG_RESOLUTION
    return height // 2 - crop_h // 2, width // 2 - crop_w // 2 + int(crop_shift)


def crop(image: np.ndarray, crop_shift: float) -> np.ndarray:
    """The (160, 704) window of an (H, W[, C]) image."""
    y, x = crop_start(image.shape[0], image.shape[1], crop_shift)
    return image[y:y + IMG_RESOLUTION[0], x:x + IMG_RESOLUTION[1]]


def depth01(metres: np.ndarray) -> np.ndarray:
    """get_depth: code / (2^24 - 1) clipped at 0.05, times 20, float64. The code is recovered
    from the float32 metres the pack decodes (code * 1000 / (2^24 - 1)): exact below 250 m,
    and anything beyond 50 m is clipped to 1 anyway."""
    code = np.rint(np.asarray(metres, np.float64) * DEPTH_CODES / 1000.0)
    return np.clip(code / DEPTH_CODES, 0.0, DEPTH_CLIP) * DEPTH_SCALE


def bev_target(planes: np.ndarray, degree: float) -> np.ndarray:
    """load_crop_bev_npy on planes 0:2 (C, H, W) -> int64 (160, 160) classes 0/1/2: planes 0:2
    as float32 (H, W, 2), rows shifted down by 7 (zeros on top), rotated by skimage's rotate
    unless degree is 0 (then the identity), the window at rows 90.., columns 170.., then
    argmax over (0, plane 0, plane 0 + plane 1). Only the window is computed."""
    y0, x0 = BEV_CENTRE - BEV_PIXELS, BEV_CENTRE - BEV_PIXELS // 2
    rows, cols = y0 + BEV_PIXELS, x0 + BEV_PIXELS          # the window's far corner
    if degree:
        bev = np.moveaxis(np.asarray(planes[:2]), 0, -1).astype(np.float32)
        shifted = np.zeros_like(bev)
        shifted[BEV_SHIFT:] = bev[:-BEV_SHIFT]
        win = np.moveaxis(_rotated(shifted, degree, rows, cols)[y0:, x0:], -1, 0)
    else:   # the shifted rows y0.. are the planes' rows y0 - 7.., cut where the BEV ends
        stop = min(rows, planes.shape[1]) - BEV_SHIFT
        win = np.asarray(planes[:2, y0 - BEV_SHIFT:stop, x0:cols], np.float32)
    return _argmax_classes(win[0], win[1])


def _rotated(image: np.ndarray, degree: float, rows: int, cols: int) -> np.ndarray:
    """skimage.transform.rotate(image, degree)[:rows, :cols]: rotate's transform built as
    rotate builds it (scikit-image 0.26 transform/_warps.py rotate: about (cols, rows) / 2 -
    0.5, tform3 + tform2 + tform1, bottom row (0, 0, 1)) and its warp (bilinear, constant 0,
    clipped to the input's range), asked for the first rows x cols output pixels only: warp's
    affine path maps each output pixel on its own, so these are the full rotation's."""
    from skimage.transform import SimilarityTransform, warp   # imgaug's dependency
    h, w = image.shape[:2]
    centre = np.array((w, h)) / 2.0 - 0.5
    tform = (SimilarityTransform(translation=-centre)
             + SimilarityTransform(rotation=np.deg2rad(degree))
             + SimilarityTransform(translation=centre))
    tform.params[2] = (0, 0, 1)
    return warp(image, tform, output_shape=(min(rows, h), min(cols, w)))


def _argmax_classes(p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """np.argmax((0, p0, p0 + p1), axis=0) (float32, first maximum wins) without the stack:
    2 where p0 + p1 beats both 0 and p0, else 1 where p0 beats 0, else 0."""
    out = (p0 > 0).astype(np.int64)
    out[(p0 + p1) > np.maximum(p0, 0)] = 2
    return out


def rotation(rad: float) -> np.ndarray:
    """Their degree_matrix: [[cos, sin], [-sin, cos]] (x, y in the LiDAR/ego frame)."""
    return np.array([[np.cos(rad), np.sin(rad)], [-np.sin(rad), np.cos(rad)]])


def lidar_to_vehicle() -> np.ndarray:
    """utils.py get_lidar_to_vehicle_transform: float64 4x4, the float32 axis swap set into
    np.eye(4), the LiDAR 1.3 m ahead and 2.5 m up."""
    t = np.eye(4)
    t[:3, :3] = np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 1]], dtype=np.float32)
    t[0, 3], t[1, 3], t[2, 3] = 1.3, 0.0, 2.5
    return t


def align_transform(ego_matrix: np.ndarray, rad: float) -> np.ndarray:
    """align()'s transform_0_to_1 for seq_len 1, where frame 0 and frame 1 are the sample's
    own: `Tr_vehicle_to_lidar @ inv(ego_matrix) @ ego_matrix @ Tr_lidar_to_vehicle`, then the
    augmentation's degree_matrix on the left, evaluated as theirs is (left to right, float64,
    numpy's inverses). Not the identity: inv(M) @ M rounds (world positions are hundreds of
    metres), so a point exactly on a 1/8 m bin edge can move by a rounding step into the next
    bin (issue 38), which binning the stored points would miss."""
    to_vehicle = lidar_to_vehicle()
    matrix = np.array(ego_matrix, dtype=np.float64)
    transform = np.linalg.inv(to_vehicle) @ np.linalg.inv(matrix) @ matrix @ to_vehicle
    degree_matrix = np.array([[np.cos(rad), np.sin(rad), 0, 0],
                              [-np.sin(rad), np.cos(rad), 0, 0],
                              [0, 0, 1, 0],
                              [0, 0, 0, 1]])
    return degree_matrix @ transform


def lidar_features(points: np.ndarray, ego_matrix: np.ndarray, rad: float) -> np.ndarray:
    """align() then lidar_to_histogram_features, on the stored points, in their arithmetic:
    the (N, 4) points in their stored dtype with the last column set to 1 (their y negations
    around it cancel exactly), `transform @ lidar.T` (float64), and the histogram of the
    result (the preset negates y, as their last step does). Applied whatever the rotation:
    align runs on every sample, and even without rotation it moves edge points and turns a
    point with an infinite coordinate into NaN (left out)."""
    pts = np.asarray(points)
    lidar = np.empty((len(pts), 4), dtype=pts.dtype)   # their lidar_0.copy(), C-ordered
    lidar[:, :3] = pts[:, :3]
    lidar[:, 3] = 1.0
    with np.errstate(invalid="ignore"):   # 0 * inf: such a point becomes NaN, left out
        moved = (align_transform(ego_matrix, rad) @ lidar.T).T
    return histogram_features(moved, PRESET)


def box_labels(boxes: np.ndarray, rad: float) -> np.ndarray:
    """parse_labels(labels, rad) + the (20, 7) float32 padding of __getitem__: rows of BOX_COLUMNS
    in the file's order, kept by their filter, one per actor id (a later duplicate id replaces
    the earlier one in place, as their dict does); beyond 20 kept boxes the rest are dropped
    (their loader raises there)."""
    to_image = np.array([[0, -1, 16], [-1, 0, 32], [0, 0, 1]], np.float32)
    to_image[:2, :] *= LABEL_PPM
    turn = np.eye(3)
    turn[:2, :2] = rotation(rad)
    transform = to_image @ turn
    kept: dict[float, np.ndarray] = {}
    for row in np.asarray(boxes, np.float64):
        px, py = np.clip(transform @ np.array([row[_C["x"]], row[_C["y"]], 1.0]), 0.0, 255.0)[:2]
        if row[_C["num_points"]] <= 1 or not (0.0 < px < 255.0 and 0.0 < py < 255.0):
            continue
        # extent_* are half sizes; their dy, dx are the file's full width and length
        kept[row[_C["id"]]] = np.array([px, py, 2 * row[_C["extent_y"]] * LABEL_PPM,
                                        2 * row[_C["extent_x"]] * LABEL_PPM,
                                        row[_C["yaw"]] + rad, row[_C["speed"]], row[_C["brake"]]])
    out = np.zeros((MAX_LABELS, 7), np.float32)
    rows = list(kept.values())[:MAX_LABELS]
    if rows:
        out[:len(rows)] = np.stack(rows)
    return out


def target_point_image(target_point: np.ndarray) -> np.ndarray:
    """draw_target_point: a circle (radius 5, thickness 3) at the point in the 256x256 LiDAR
    image (8 px/m, the LiDAR 1.3 m ahead), float64 (1, 256, 256) in [0, 1]."""
    p = np.array(target_point, np.float64)
    p[1] += TP_LIDAR_X
    p *= TP_PPM
    col, row = p[0] + TP_IMAGE // 2, TP_IMAGE + p[1]   # their y: 256 - (-8 y)
    point = np.clip(np.array([col, row]).astype(np.int32), 0, TP_IMAGE)
    image = np.zeros((TP_IMAGE, TP_IMAGE), np.uint8)
    cv2.circle(image, (int(point[0]), int(point[1])), radius=5, color=(255, 255, 255),
               thickness=3)
    return np.divide(image.reshape(1, TP_IMAGE, TP_IMAGE), 255.0, dtype=np.float64)


def draw_rotation(augment: bool, rng: np.random.Generator) -> float:
    """Their `do_augment` and degree: with probability 1 - inv_augment_prob, uniform in
    [-aug_max_rotation, aug_max_rotation) degrees; 0 without augment."""
    if augment and rng.random() > INV_AUGMENT_PROB:
        return (rng.random() * 2.0 - 1.0) * AUG_MAX_ROTATION
    return 0.0


def _cameras(s: dict, degree: float) -> dict[str, Any]:
    shift = degree / 60 * IMG_WIDTH / SCALE
    # (3, H, W) from cv2.split's planes: numpy's transposing copy of the HWC crop was ~5x slower
    return {"rgb": np.stack(cv2.split(crop(s["images"][0], shift))),
            "bev": bev_target(s["bev"], degree),
            "depth": depth01(crop(s["depth"][0], shift)),
            "semantic": np.ascontiguousarray(crop(s["semantics"][0], shift))}


def tf2022_sample(adapter: ModelAdapter, s: dict, rng: np.random.Generator) -> dict:
    """One sample as TransFuser 2022's CARLA_Data.__getitem__ returns it (module docstring),
    key for key in its order and Python/numpy types, so default collate gives their batch."""
    m = s["measurements"]
    degree = draw_rotation(bool(s.get("augment")), rng)
    rad = float(np.deg2rad(degree))
    out = _cameras(s, degree)
    turn = rotation(rad)
    target = turn @ np.asarray(s["target_point"], np.float64)
    out.update({
        "lidar": lidar_features(s["lidar"][:int(s["lidar_len"])], s["fields"]["ego2world"],
                                rad),
        "label": box_labels(s["boxes"][:int(s["boxes_len"])], -rad),
        "ego_waypoint": (turn @ np.asarray(s["waypoints"], np.float64).T).T,
        "steer": float(m["steer"]), "throttle": float(m["throttle"]),
        "brake": bool(m["brake"]), "light": bool(m["light_hazard"]),
        "speed": float(s["speed"]), "theta": float(m["theta"]),
        "x_command": float(m["x_command"]), "y_command": float(m["y_command"]),
        "target_point": target, "target_point_image": target_point_image(target)})
    return out


TRANSFUSER2022 = ModelAdapter(
    name="transfuser2022",
    source="autonomousvision/transfuser@22b3ccd team_code_transfuser/data.py",
    layouts=("transfuser2022",), image_size=(160, 960), transform=tf2022_sample,
    cameras=("front",),
    # ego2world: the measurement's ego_matrix, which their align() multiplies the points by
    fields=("measurements", "depth", "semantics", "bev", "lidar", "boxes", "ego2world"),
    needs=NEEDS, pred_len=PRED_LEN, own_augment=True,   # their rotation; no colour augmentation
    pack="carla-wds pack RAW OUT --layout transfuser2022 --allow-pickle-input (TransFuser "
         "2022's routes as its data agent saves them, every frame: leave --stride out)")
