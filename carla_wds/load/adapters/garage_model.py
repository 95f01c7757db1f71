"""adapter="garage": the batches of carla_garage's own DataLoader(CARLA_Data) after torch's
default collate, as TransFuser++ trains on them (autonomousvision/carla_garage@1448bed
team_code/data.py CARLA_Data.__getitem__, with team_code/config.py GlobalConfig; use_wp_gru on,
so `ego_waypoints` is served too; another config: garage_options.py). Checked against their
loader's output in tests/load/adapters/test_garage_model.py (golden:
tools/golden/garage_batches.py).

What each key is, from their formulas (config.py values in brackets):
- rgb: the front camera, uint8 (3, 256, 1024) as saved (their loader never resizes or crops);
- semantic: the camera's CARLA ids through their 7-class converter, uint8 (H, W) (the pack's
  class table, garage.yaml); bev_semantic: the BEV class ids, uint8 (256, 256);
- depth: their 8-bit depth / 255 as float32 (H, W), i.e. metres / 50 (the pack stores metres
  = v / 255 * 50; v is recovered exactly, so the float32 is theirs bit for bit);
- lidar: their LiDAR histogram (carla_wds.datasets.garage.PRESET), float32 (1, 256, 256);
- the CenterNet targets of the filtered boxes (centernet.py) at 1/4 of the LiDAR grid (64 x 64)
  and bounding_boxes, float32 (max_num_bbs=30, 8), zero rows after the kept boxes;
- the box filter (parse_bounding_boxes): no ego box; cars and walkers need more than
  num_lidar_hits_for_detection [7] LiDAR hits where the file counts them; traffic lights only
  if they affect the ego and are not Green; stop signs only if they affect the ego; the
  (possibly twin-moved) centre strictly inside x, y in (-32, 32) and z in (-4, 4) m;
- brake, angle_index (np.digitize of angle by [-0.375, -0.125, 0.125, 0.375]), target_speed
  (0 when braking, else 1 + digitize of target_speed by [2.1, 5.1, 8.1] m/s), steer, throttle,
  light (light_hazard), stop_sign (stop_sign_hazard), junction, speed, theta: the frame's
  measurements with their Python types (float64 / bool / int64 after collate);
- command, next_command: their command_to_one_hot (6 floats: command - 1, negative -> 3,
  out of range -> 3); route: the pack's smoothed route (20, 2) (garage's smooth_path, twin
  route when the twin is drawn); target_point, aim_wp, ego_waypoints float64.
With augment: their colour augmentation (image_augmenter(color_aug_prob=0.5), no cutout) on the
served camera; the camera twin (the load adapter garage_camera_twin, p = augment_percentage
0.5) swaps the augmented set in, with every label moved as theirs.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...datasets.garage import DEPTH_MAX
from ...modalities.boxes import BOX_CLASSES, BOX_COLUMNS, LIGHT_STATES
from .centernet import centernet_targets
from .garage import NAME as TWIN
from .model import ModelAdapter

# config.py values (carla_garage@1448bed team_code/config.py)
MIN_XY, MAX_XY, MIN_Z, MAX_Z, PIXELS_PER_METER = -32.0, 32.0, -4.0, 4.0, 4.0
LIDAR_HW, BEV_DOWN_SAMPLE, MAX_NUM_BBS, MIN_LIDAR_HITS = 256, 4, 30, 7
TARGET_SPEED_BINS = np.array([2.0 + 0.1, 5.0 + 0.1, 8.0 + 0.1])   # walker, slow, fast + 0.1
ANGLE_BINS = np.array([-0.375, -0.125, 0.125, 0.375])
COLOR_AUG_PROB, AUGMENT_PERCENTAGE = 0.5, 0.5
_C = {name: i for i, name in enumerate(BOX_COLUMNS)}
_GREEN = float(LIGHT_STATES.index("Green"))
NEEDS = ("target_point", "aim_wp", "route", "command", "next_command", "steer", "throttle",
         "brake", "junction", "light_hazard", "stop_sign_hazard", "angle", "speed",
         "target_speed", "theta", "augmentation_translation", "augmentation_rotation")


@dataclass(frozen=True)
class GarageOptions:
    """The config fields garage_sample implements (garage_options.py reads their config);
    these defaults are config.py's, with use_wp_gru on."""
    max_num_bbs: int = MAX_NUM_BBS
    target_speed_bins: tuple[float, ...] = tuple(TARGET_SPEED_BINS.tolist())
    angle_bins: tuple[float, ...] = tuple(ANGLE_BINS.tolist())
    use_wp_gru: bool = True
    augment: bool = True
    augment_percentage: float = AUGMENT_PERCENTAGE
    use_color_aug: bool = True
    color_aug_prob: float = COLOR_AUG_PROB


def normalize_angle(x: float) -> float:
    """transfuser_utils.normalize_angle: x mod 2pi, minus 2pi above pi."""
    x = x % (2 * np.pi)
    return x - 2 * np.pi if x > np.pi else x


def command_one_hot(command: int) -> np.ndarray:
    """transfuser_utils.command_to_one_hot: CARLA's RoadOption 1..6 -> index 0..5; a negative
    (VOID) command counts as 4 (lane follow); anything else out of range -> index 3."""
    c = 4 if command < 0 else command
    c -= 1
    if c not in range(6):
        c = 3
    out = np.zeros(6)
    out[c] = 1.0
    return out


def keep_box(row: np.ndarray) -> bool:
    """parse_bounding_boxes' filter on one BOX_COLUMNS row (positions already in the served
    camera's frame, as their get_bbox_label moves them before filtering)."""
    cls = int(row[_C["class"]])
    if cls == BOX_CLASSES["ego"]:
        return False
    hits = row[_C["num_points"]]
    if hits >= 0 and hits <= MIN_LIDAR_HITS:     # FILL (-1): the file has no count
        return False
    affects = row[_C["affects_ego"]] == 1
    if cls == BOX_CLASSES["traffic_light"] and (not affects or row[_C["light_state"]] == _GREEN):
        return False
    if cls == BOX_CLASSES["stop_sign"] and not affects:
        return False
    x, y, z = (float(row[_C[n]]) for n in ("x", "y", "z"))
    return MIN_XY < x < MAX_XY and MIN_XY < y < MAX_XY and MIN_Z < z < MAX_Z


def box_label(row: np.ndarray) -> np.ndarray:
    """get_bbox_label then bb_vehicle_to_image_system: (x, y, extent_x, extent_y, yaw, speed,
    brake, class) in the BEV image's pixel frame: metres * 4 px/m, axes swapped (image x =
    vehicle y), shifted so the ego is at (128, 128), yaw negated; speed for cars and walkers,
    brake for cars, else 0."""
    cls = int(row[_C["class"]])
    moving = cls in (BOX_CLASSES["car"], BOX_CLASSES["walker"])
    speed = float(row[_C["speed"]]) if moving else 0.0
    brake = float(row[_C["brake"]]) if cls == BOX_CLASSES["car"] else 0.0
    x, y, ex, ey = (float(row[_C[n]]) * PIXELS_PER_METER
                    for n in ("x", "y", "extent_x", "extent_y"))
    shift = -MIN_XY * PIXELS_PER_METER
    yaw = normalize_angle(float(row[_C["yaw"]]))
    return np.array([y + shift, x + shift, ey, ex, -yaw, speed, brake, cls])


def garage_boxes(boxes: np.ndarray, count: int) -> np.ndarray:
    """The kept boxes of a sample's table, (N, 8) float64 in their order."""
    rows = [box_label(r) for r in np.asarray(boxes)[:count] if keep_box(r)]
    return np.array(rows).reshape(-1, 8)


def speed_angle_classes(target_speed: float, brake: bool, angle: float,
                        speed_bins: Any = TARGET_SPEED_BINS, angle_bins: Any = ANGLE_BINS
                        ) -> tuple[Any, Any]:
    """get_indices_speed_angle: (target speed class, 0 = brake; steering angle class)."""
    speed_index = 0 if brake else np.digitize(x=target_speed, bins=np.asarray(speed_bins)) + 1
    return speed_index, np.digitize(x=angle, bins=np.asarray(angle_bins))


@functools.lru_cache(maxsize=4)
def colour_augmenter(prob: float = COLOR_AUG_PROB):
    """data.py image_augmenter(prob=color_aug_prob [0.5], cutout=False): seven imgaug steps,
    each applied with probability prob, in random order (imgaug's own implementations)."""
    from imgaug import augmenters as ia
    s = functools.partial(ia.Sometimes, prob)
    return ia.Sequential([
        s(ia.GaussianBlur((0, 1.0))),
        s(ia.AdditiveGaussianNoise(loc=0, scale=(0.0, 0.05 * 255), per_channel=0.5)),
        s(ia.Dropout((0.01, 0.1), per_channel=0.5)),
        s(ia.Multiply((1 / 1.2, 1.2), per_channel=0.5)),
        s(ia.LinearContrast((1 / 1.2, 1.2), per_channel=0.5)),
        s(ia.Grayscale((0.0, 0.5))),
        s(ia.ElasticTransformation(alpha=(0.5, 1.5), sigma=0.25))], random_order=True)


def camera(image: np.ndarray, augment: bool, rng: np.random.Generator,
           prob: float = COLOR_AUG_PROB) -> np.ndarray:
    """The served camera as their loader returns it: uint8 (3, H, W), colour-augmented with
    augment (seeded from the sample's generator, so a draw repeats in every run)."""
    if augment:
        aug = colour_augmenter(prob)
        aug.seed_(int(rng.integers(2 ** 31)))
        image = aug(image=np.ascontiguousarray(image))
    return np.ascontiguousarray(np.transpose(image, (2, 0, 1)))


def depth01(metres: np.ndarray) -> np.ndarray:
    """Their depth: the 8-bit value / 255 in float32 (v recovered exactly from v / 255 * 50).
    The same float64 operations as rint(m * 255 / 50), in one buffer (2 passes fewer)."""
    v = np.array(metres, np.float64)
    v *= 255.0
    v /= DEPTH_MAX
    np.rint(v, out=v)
    out = v.astype(np.float32)
    out /= np.float32(255.0)
    return out


def _images(s: dict, rng: np.random.Generator, o: GarageOptions) -> dict[str, Any]:
    return {"semantic": np.ascontiguousarray(s["semantics"][0]),
            "bev_semantic": np.ascontiguousarray(s["bev"][0]),
            "depth": depth01(s["depth"][0]),
            "rgb": camera(s["images"][0], bool(s.get("augment")) and o.use_color_aug, rng,
                          o.color_aug_prob)}


def _targets(s: dict, max_num_bbs: int = MAX_NUM_BBS) -> tuple[dict[str, Any], np.ndarray]:
    """CenterNet targets of every kept box; bounding_boxes: the first max_num_bbs of them,
    zero rows after (data.py __getitem__'s padding)."""
    boxes = garage_boxes(s["boxes"], int(s["boxes_len"]))
    feat = LIDAR_HW // BEV_DOWN_SAMPLE
    targets, avg_factor = centernet_targets(boxes, feat, feat, LIDAR_HW, LIDAR_HW)
    padded = np.zeros((max_num_bbs, 8), np.float32)
    padded[:min(len(boxes), max_num_bbs)] = boxes[:max_num_bbs]
    return {**targets, "avg_factor": avg_factor}, padded


def garage_sample(adapter: ModelAdapter, s: dict, rng: np.random.Generator) -> dict:
    """One sample as carla_garage's CARLA_Data.__getitem__ returns it (module docstring), key
    for key in its order and Python/numpy types, so default collate gives their batch."""
    m, o = s["measurements"], adapter.options or GarageOptions()
    out = _images(s, rng, o)
    targets, padded = _targets(s, o.max_num_bbs)
    out.update(targets)
    if o.use_wp_gru:
        out["ego_waypoints"] = np.asarray(s["waypoints"], np.float64)
    brake = bool(m["brake"])
    speed_index, angle_index = speed_angle_classes(float(m["target_speed"]), brake,
                                                   float(m["angle"]), o.target_speed_bins,
                                                   o.angle_bins)
    out.update({"brake": brake, "angle_index": angle_index, "target_speed": speed_index,
                "lidar": np.ascontiguousarray(s["lidar"], np.float32),
                "bounding_boxes": padded,
                "steer": float(m["steer"]), "throttle": float(m["throttle"]),
                "light": bool(m["light_hazard"]), "stop_sign": bool(m["stop_sign_hazard"]),
                "junction": bool(m["junction"]), "speed": float(m["speed"]),
                "theta": float(m["theta"]),
                "command": command_one_hot(int(m["command"])),
                "next_command": command_one_hot(int(m["next_command"])),
                "route": np.asarray(m["route"], np.float64),
                "target_point": np.asarray(m["target_point"], np.float64),
                "aim_wp": np.asarray(m["aim_wp"], np.float64)})
    return out


GARAGE = ModelAdapter(
    name="garage", source="autonomousvision/carla_garage@1448bed team_code/data.py",
    layouts=("garage",), image_size=(256, 1024), transform=garage_sample,
    cameras=("front",), fields=("measurements", "depth", "semantics", "bev", "lidar", "boxes"),
    lidar_histogram="garage", needs=NEEDS, pred_len=8,
    pack="carla-wds pack RAW OUT --layout garage (carla_garage's routes as its data agent "
         "saves them, every frame: leave --stride out)",
    # augment=True: their colour augmentation (in garage_sample) instead of the loader's,
    # and the camera twin at their augment_percentage
    own_augment=True, augment_load_adapters=((TWIN, AUGMENT_PERCENTAGE),),
    options=GarageOptions())
TWIN_P = (TWIN, AUGMENT_PERCENTAGE)
