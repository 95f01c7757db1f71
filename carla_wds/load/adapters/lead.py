"""adapter="lead": the batch of LEAD's own DataLoader(CARLAData) after their collate, as their
TFv6 planner trains on it (kesai-labs/lead@44891760 lead/data_loader/carla_dataset.py
CARLAData.__getitem__, lead/training/mixed_training_utils.py mixed_data_collate_fn, with
lead/training/config_training.py TrainingConfig for Leaderboard 2.0 routes, 3 cameras, the
planning decoder, the semantic, box (detect_boxes), BEV semantic (use_bev_semantic) and
radar (use_radars, radar_detection, use_radar_detection) parts on as by their Leaderboard
defaults, depth off: CONFIG below). Written
from their formulas; checked against their loader's output in
tests/load/adapters/test_lead_model.py (golden: tools/golden/lead_batches.py).

What each key is (their config values in brackets):
- rgb: the three cameras side by side, as their strip, uint8 (3, 384, 1152) (never resized;
  crop_height 0 and no camera left out in Leaderboard mode);
- semantic: their grouped class ids of the three cameras side by side, uint8 (384, 1152)
  (save_grouped_semantic: no converter; perspective_downsample_factor 1);
- rasterized_lidar: float32 (1, 320, 384): the points with time < 10
  [training_used_lidar_steps] and -4 <= z <= 10 [min/max_height_lidar], counted in 0.25 m
  cells over x in [-32, 64], y in [-40, 40] (np.histogramdd), capped at 5 and divided by 5,
  transposed (y down the rows);
- future_waypoints (8, 2), future_yaws (8,), route (10, 2) and route_labels_curvature (the
  mean |atan2(y, x)| of the route), target_point / _next / _previous: the pack's LEAD labels
  (carla_wds/pack/datasets/lead/labels.py, their formulas), float64;
- command, next_command, previous_command: command_to_one_hot of the merged commands [0], [1],
  [0] (6 floats);
- speed, brake, throttle, perturbate_sensor, perturbation_translation / _rotation (the metas'
  values in every sample: their numeric list overwrites the 0 set for an own-sensor sample),
  source_dataset (1: SourceDataset.CARLA), route_number, frame_number, scenario_type(_id)
  and the metas' attributes of their two lists (META_TEXT, META_NUMBERS), with their types;
- center_net_*: their box labels and CenterNet targets (lead_boxes.py), from the frame's
  boxes moved by the twin's perturbation as theirs are;
- bev_semantic and hdmap (one array, as theirs): the saved BEV map (the twin's own for the
  twin) cut and upscaled, with the frame's boxes, moved by the perturbation, drawn in
  (lead_bev.py), uint8 (320, 384);
- radar1..radar4, radar and radar_detections: the sensors' rows in their grid, 75 each with the
  sensor's index, and the boxes with radar points, fastest first (lead_radar.py).
With augment: the perturbated twin at their use_sensor_perburtation_prob [0.5] (the camera
twin load adapter: sensors swapped, labels and LiDAR moved) and their colour augmentation
(image_augmenter(prob=0.2), six imgaug steps).
Not served (docs/adapters/lead.md): depth (the loader resizes LEAD's quarter-size depth to
the camera size; theirs resizes the strip) and their
bookkeeping (index, global_index, bucket_identity, loading_*time).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...datasets.lead import SCENARIO_TYPES
from ...manifest import Manifest
from .garage import NAME as TWIN
from .garage_model import command_one_hot
from .lead_bev import lead_bev_semantic
from .lead_boxes import lead_box_targets
from .lead_radar import lead_radar
from .model import ModelAdapter, _pack_arg

SOURCE = "kesai-labs/lead@44891760 lead/data_loader/carla_dataset.py"
# their TrainingConfig fields the adapter serves (everything else at its default)
CONFIG = {"use_planning_decoder": True, "use_semantic": True, "detect_boxes": True,
          "use_depth": False, "use_bev_semantic": True, "use_radars": True,
          "radar_detection": True, "use_radar_detection": True}
CAMERAS = ("front_left", "front", "front_right")
MIN_X, MAX_X, MIN_Y, MAX_Y, PIXELS_PER_METER = -32, 64, -40, 40, 4   # Leaderboard mode
MIN_Z, MAX_Z, LIDAR_STEPS, HIST_MAX = -4.0, 10.0, 10, 5
PERTURBATION_PROB, COLOR_AUG_PROB = 0.5, 0.2
CARLA_SOURCE = 1                       # constants.py SourceDataset.CARLA
NEEDS = ("target_point_next", "target_point_previous", "future_yaws",
         "route", "command", "next_command", "speed", "augmentation_translation",
         "augmentation_rotation")
# __getitem__'s two lists of metas attributes (l.245-351), each with the type their values
# have, for the fill their collate gives a None beside other samples' values
META_TEXT = {
    "town": str, "current_active_scenario_type": str, "previous_active_scenario_type": str,
    "changed_route": bool, "stop_sign_hazard": bool, "walker_hazard": bool,
    "light_hazard": bool, "vehicle_hazard": bool, "lane_type_str": str,
    "is_intersection": bool, "does_emergency_brake_for_pedestrians": bool,
    "construction_obstacle_two_ways_stuck": bool, "accident_two_ways_stuck": bool,
    "parked_obstacle_two_ways_stuck": bool, "vehicle_opens_door_two_ways_stuck": bool,
    "vehicle_opened_door": bool, "vehicle_door_side": str, "ego_lane_id": int,
    "rear_danger_8": bool, "rear_danger_16": bool, "brake_cutin": bool,
    "weather_setting": str, "jpeg_storage_quality": int,
    "emergency_brake_for_special_vehicle": bool, "visual_visibility": int,
    "num_parking_vehicles_in_proximity": int, "slower_bad_visibility": bool,
    "slower_clutterness": bool, "slower_occluded_junction": bool,
    "over_head_traffic_light": bool, "europe_traffic_light": bool, "stop_sign_close": bool,
    "num_dangerous_adversarial": int, "num_safe_adversarial": int,
    "num_ignored_adversarial": int, "rear_adversarial_id": int}
META_NUMBERS = (
    "steer", "throttle", "brake", "dist_to_construction_site", "dist_to_accident_site",
    "dist_to_parked_obstacle", "dist_to_vehicle_opens_door", "dist_to_cutin_vehicle",
    "dist_to_pedestrian", "dist_to_biker", "distance_to_next_junction",
    "signed_dist_to_lane_change", "speed", "accel_x", "accel_y", "accel_z",
    "angular_velocity_x", "angular_velocity_y", "angular_velocity_z", "speed_limit",
    "privileged_acceleration", "route_curvature", "distance_to_intersection_index_ego",
    "ego_lane_width", "route_left_length", "distance_ego_to_route", "target_speed_limit",
    "target_speed", "theta", "privileged_yaw", "traffic_light_height", "second_highest_speed",
    "second_highest_speed_limit", "perturbation_rotation", "perturbation_translation")


def rasterize(points: np.ndarray) -> np.ndarray:
    """rasterize_lidar (carla_dataset_utils.py l.30-82) of the used sweeps: float32 (1, H, W)."""
    p = np.asarray(points, np.float64)
    p = p[p[:, 3] < LIDAR_STEPS]
    p = p[(p[:, 2] <= MAX_Z) & (MIN_Z <= p[:, 2])]
    xbins = np.linspace(MIN_X, MAX_X, (MAX_X - MIN_X) * PIXELS_PER_METER + 1)
    ybins = np.linspace(MIN_Y, MAX_Y, (MAX_Y - MIN_Y) * PIXELS_PER_METER + 1)
    hist = np.histogramdd(p[:, :2], bins=(xbins, ybins))[0]
    hist[hist > HIST_MAX] = HIST_MAX
    return (hist / HIST_MAX).T.astype(np.float32)[None]


def curvature(route: np.ndarray) -> float:
    """common_utils.waypoints_curvature: the mean |atan2(y, x)| of the route's points."""
    return float(np.mean(np.abs(np.arctan2(route[:, 1], route[:, 0]))))


def scenario_type(current: Any, previous: Any) -> str:
    """__getitem__ l.352-372: the active scenario, else the previous one, else "NA"."""
    for value in (current, previous):
        if value is not None and value != "NA":
            return str(value)
    return "NA"


def meta_values(metas: dict) -> dict[str, Any]:
    """Their two lists of metas attributes (l.245-351): text/flags as saved (None -> their
    collate's fill for the type; vehicle_door_side None -> "NA", a list -> its first item),
    numbers as float (None -> inf), only those the metas hold."""
    out: dict[str, Any] = {}
    for name, kind in META_TEXT.items():
        value = metas.get(name)
        if name == "vehicle_door_side":
            value = "NA" if value is None else (value[0] if isinstance(value, list) else value)
        out[name] = kind() if value is None else kind(value)
    for name in ("current_active_scenario_type", "previous_active_scenario_type"):
        out[name] = "NA" if metas.get(name) is None else str(metas[name])
    for name in META_NUMBERS:
        if name in metas:
            out[name] = np.inf if metas[name] is None else float(metas[name])
    return out


@functools.lru_cache(maxsize=2)
def colour_augmenter(prob: float = COLOR_AUG_PROB):
    """image_augmenter(config, prob) (carla_dataset_utils.py l.86-112): six imgaug steps, each
    with probability prob, in random order."""
    from imgaug import augmenters as ia
    s = functools.partial(ia.Sometimes, prob)
    return ia.Sequential([
        s(ia.GaussianBlur((0, 1.0))),
        s(ia.AdditiveGaussianNoise(loc=0, scale=(0.0, 0.05 * 255), per_channel=0.5)),
        s(ia.Dropout((0.01, 0.1), per_channel=0.5)),
        s(ia.Multiply((1 / 1.2, 1.2), per_channel=0.5)),
        s(ia.LinearContrast((1 / 1.2, 1.2), per_channel=0.5)),
        s(ia.ElasticTransformation(alpha=(0.5, 1.5), sigma=0.25))], random_order=True)


def strip(images: np.ndarray, augment: bool, rng: np.random.Generator) -> np.ndarray:
    """The cameras side by side as their rgb: uint8 (3, H, n * W), colour-augmented with
    augment (seeded from the sample's generator)."""
    image = np.concatenate(list(images), axis=1)
    if augment:
        aug = colour_augmenter()
        aug.seed_(int(rng.integers(2 ** 31)))
        image = aug(image=np.ascontiguousarray(image))
    return np.ascontiguousarray(np.transpose(image, (2, 0, 1)))


def _f64(value: Any) -> np.ndarray:
    return np.asarray(value, np.float64)


def lead_sample(adapter: ModelAdapter, s: dict, rng: np.random.Generator) -> dict:
    """One sample as CARLAData.__getitem__ returns it under CONFIG (module docstring)."""
    m, metas = s["measurements"], s["fields"]["metas"]
    twin = bool(int(s.get("camera_set", 0)))
    route = _f64(m["route"])
    route_id, _, frame = s["key"].rpartition("__")
    meta = meta_values(metas)
    kind = scenario_type(meta["current_active_scenario_type"],
                         meta["previous_active_scenario_type"])
    command = command_one_hot(int(m["command"]))
    lidar = s["lidar"][: int(s.get("lidar_len", len(s["lidar"])))]
    shift = float(m["augmentation_translation"]) if twin else 0.0
    turn = float(m["augmentation_rotation"]) if twin else 0.0
    boxes = lead_box_targets(s["fields"]["bboxes"], shift, turn, kind, metas)
    out = {"source_dataset": CARLA_SOURCE, "perturbate_sensor": twin,
           "perturbation_translation": shift, "perturbation_rotation": turn,
           "route_number": route_id.rpartition("__")[2], "frame_number": f"{int(frame):04d}",
           **meta, "scenario_type": kind, "scenario_type_id": SCENARIO_TYPES.index(kind),
           "future_waypoints": _f64(s["waypoints"]), "future_yaws": _f64(m["future_yaws"]),
           "brake": bool(metas["brake"]), "throttle": float(metas["throttle"]),
           "route": route, "route_labels_curvature": curvature(route),
           "speed": float(metas["speed"]),
           "target_point_next": _f64(m["target_point_next"]),
           "target_point": _f64(s["target_point"]),
           "target_point_previous": _f64(m["target_point_previous"]),
           "command": command, "next_command": command_one_hot(int(m["next_command"])),
           "previous_command": command.copy(),
           "semantic": np.ascontiguousarray(np.concatenate(list(s["semantics"]), axis=1)),
           "rasterized_lidar": rasterize(lidar),
           "rgb": strip(s["images"], bool(s.get("augment")), rng),
           **boxes, **lead_radar(s["fields"]["radar"], boxes["center_net_bounding_boxes"]),
           **lead_bev_semantic(s["fields"]["hdmap"], s["fields"]["bboxes"], shift, turn, kind,
                               metas)}
    return out


@dataclass(frozen=True)
class LeadAdapter(ModelAdapter):
    """ModelAdapter with LEAD's pack checks: their three strip cameras, the planner's frames
    (no --all-frames), cameras as saved (no --resize), decoded pixels kept (PNG) and their
    camera size (their image anchors are sized from it)."""

    def check(self, manifest: Manifest) -> None:
        super().check(manifest)
        where = manifest.where
        cams = (manifest.doc.get("spec") or {}).get("strip_cameras")
        if cams is not None and tuple(cams) != CAMERAS:
            self._refuse(where, f"hold the strip cameras {list(cams)}; it serves LEAD's "
                         f"3-camera Leaderboard 2.0 target {list(CAMERAS)} (the 6-camera "
                         "target is not served)")
        if _pack_arg(manifest, "all_frames"):
            self._refuse(where, "were packed with --all-frames; it serves only the frames "
                         "LEAD's planner trains on (leave --all-frames out)")
        if _pack_arg(manifest, "resize"):
            self._refuse(where, "were packed with --resize; LEAD reads its cameras as saved "
                         "(leave --resize out)")
        stored = _pack_arg(manifest, "image_format")
        if stored != "png":
            how = stored or "the source JPEG, cut and re-encoded"
            self._refuse(where, f"store the cameras as {how}; their loader decodes the strip "
                         "itself (pack with --image-format png to keep its pixels)")
        sizes = {tuple(v) for v in (manifest.doc.get("image_sizes") or {}).values()}
        if sizes and sizes != {tuple(self.image_size)}:
            self._refuse(where, f"hold cameras of {sorted(sizes)} (H, W); LEAD's config reads "
                         f"{self.image_size[0]}x{self.image_size[1]} cameras as saved "
                         "(config_base.py camera_calibration): pack routes collected at that "
                         "size")


LEAD = LeadAdapter(
    name="lead", source=SOURCE, layouts=("lead",), image_size=(384, 384),
    transform=lead_sample, cameras=CAMERAS,
    fields=("measurements", "metas", "bboxes", "lidar", "semantic", "hdmap", "radar"),
    needs=NEEDS, pred_len=8,
    pack="carla-wds pack RAW OUT --layout lead --allow-pickle-input --image-format png "
         "(LEAD's routes, every planner frame: leave --stride, --all-frames and --resize out)",
    extra_keys=("valid", "key"), own_augment=True,
    augment_load_adapters=((TWIN, PERTURBATION_PROB),))
