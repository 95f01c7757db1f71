"""Procedural routes in TCP's raw layout with its Roach supervision (OpenDriveLab/TCP).

The episodes, the front camera and the ego poses are exactly tcp.py's "tcp" ones (same seed,
same images and positions); this module adds what TCP's roach_ap_agent.py save() writes next
to them (TCP@73cc1dd leaderboard/team_code/roach_ap_agent.py run_step, save, get_target_gps):
  <root>/Town0K/routes_town0K_<ep>/
    rgb/NNNN.png           tcp.py's front camera (256x900 HxW by default)
    measurements/NNNN.json x, y, theta, speed, x/y_command_far/near, command_far/near,
                           should_brake, x_target, y_target, target_command (no controls: those
                           are in supervision/)
    supervision/NNNN.npy   np.save of a dict (a pickled 0-d object array): action (float32 (3,)
                           executed throttle, steer, brake), value (float32), action_mu /
                           action_sigma (float32 (2,) Beta alpha / beta of [acc, steer]),
                           features (float32 (256,)), speed (float), target_gps (float32 (3,)
                           lat, lon, z), target_command (int8 (1,)), should_brake, only_ap_brake
    bev/NNNN.png           the debug render: a 192x192 BEV next to a black text panel (192x384x3);
                           TCP's loader never reads it
Roach's policy output is made consistent with the executed controls: the Beta means of [acc,
steer] give its throttle/brake and steer, and when the collision detector brakes (should_brake)
while Roach did not, only_ap_brake is True, as in run_step.
"""
from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import cv2
import numpy as np

from . import world as base
from . import garage as sg
from . import tcp

logger = logging.getLogger(__name__)

ROACH_SIZE = (256, 900)   # (height, width), as image_size
GNSS_SCALE = (111324.60662786, 111319.490945)   # planner.py: (gps - mean) * scale, mean 0
FEATURES = 256
BEV_SIZE, BEV_PPM = 192, 5.0
FOLDERS = ("rgb", "measurements", "supervision", "bev")
# Roach's 0.9.10 BEV colours (RGB) of garage.bev_semantics classes
_BEV_COLOURS = {1: (85, 87, 83), 2: (46, 52, 54), 3: (255, 255, 255), 4: (186, 189, 182)}


def _beta(mean: float, concentration: float) -> tuple[float, float]:
    """Beta (alpha, beta) with the given mean in (0, 1)."""
    m = float(np.clip(mean, 0.02, 0.98))
    return m * concentration, (1.0 - m) * concentration


def supervision(sim: dict, t: int, rng: np.random.Generator,
                projection: np.ndarray) -> dict:
    """The supervision_dict of run_step for frame t (types as the agent makes them)."""
    steer, throttle, brake = (float(v) for v in sim["controls"][t])
    hazard = str(sim["hazard"][t])
    should_brake = hazard in ("vehicle", "walker")   # collision_detect: vehicles, walkers
    # Roach itself brakes for most hazards; the rest is left to the collision detector.
    roach_brakes = brake > 0.5 and not (should_brake and rng.random() < 0.4)
    acc = -min(brake, 1.0) if roach_brakes else max(throttle, 0.05)
    k_acc, k_steer = rng.uniform(4.0, 20.0), rng.uniform(20.0, 60.0)
    mu_acc, sigma_acc = _beta((acc + 1.0) / 2.0, k_acc)
    mu_steer, sigma_steer = _beta((steer + 1.0) / 2.0, k_steer)
    ctl = ([0.0, steer * 0.5, 1.0] if should_brake
           else [max(acc, 0.0), steer, max(-acc, 0.0)])
    state = np.array([sim["speed"][t] / 10.0, steer, acc, float(sim["command"][t]) / 6.0,
                      float(should_brake), 1.0])
    features = np.maximum(projection @ state + rng.normal(0.0, 0.1, FEATURES), 0.0)
    tx, ty = (float(v) for v in sim["target"][t])
    return {"action": np.array(ctl, dtype=np.float32),
            "value": np.float32(12.0 - 6.0 * should_brake + rng.normal(0.0, 0.5)),
            "action_mu": np.array([mu_acc, mu_steer], dtype=np.float32),
            "action_sigma": np.array([sigma_acc, sigma_steer], dtype=np.float32),
            "features": features.astype(np.float32),
            "speed": float(sim["speed"][t]),
            "target_gps": np.array([tx / GNSS_SCALE[0], ty / GNSS_SCALE[1], 0.0],
                                   dtype=np.float32),
            "target_command": np.array([int(sim["command"][t])], dtype=np.int8),
            "should_brake": should_brake,
            "only_ap_brake": bool(should_brake and not roach_brakes)}


def supervision_npy(sup: dict) -> bytes:
    """np.save(f, supervision_dict): a pickled 0-d object array."""
    buf = io.BytesIO()
    np.save(buf, sup, allow_pickle=True)
    return buf.getvalue()


def measurement(sim: dict, t: int) -> dict:
    """save(): tcp.py's tcp positions and route target, plus the near (waypoint planner,
    a few metres ahead) and far (command planner: the route target) nodes."""
    m = tcp.measurement("tcp", sim, t)
    road, s_t = sim["road"], float(sim["s"][t])
    nx, ny, _ = road.at(np.array([s_t + max(4.0, 1.5 * m["speed"])]))
    cmd = int(sim["command"][t])
    return {"x": m["x"], "y": m["y"], "theta": m["theta"], "speed": m["speed"],
            "x_command_far": m["x_target"], "y_command_far": m["y_target"], "command_far": cmd,
            "x_command_near": float(nx[0]), "y_command_near": float(ny[0]), "command_near": cmd,
            "should_brake": str(sim["hazard"][t]) in ("vehicle", "walker"),
            "x_target": m["x_target"], "y_target": m["y_target"],
            "target_command": m["target_command"]}


def bev_render(sim: dict, t: int, sup: dict) -> np.ndarray:
    """im_render: Roach's 192x192 BEV (forward up) next to a black panel with its text."""
    pose = tuple(float(sim[k][t]) for k in ("x", "y", "theta"))
    classes = sg.bev_semantics(sim["road"], pose, [], BEV_SIZE, BEV_PPM)
    bev = np.zeros((BEV_SIZE, BEV_SIZE, 3), np.uint8)
    for cls, rgb in _BEV_COLOURS.items():
        bev[classes == cls] = rgb
    panel = np.zeros((BEV_SIZE, BEV_SIZE, 3), np.uint8)
    lines = [f"a{np.round(sup['action'], 2).tolist()}", f"should_brake: {sup['should_brake']}"]
    for i, txt in enumerate(lines):
        panel = cv2.putText(panel, txt, (5, (i + 2) * 12), cv2.FONT_HERSHEY_SIMPLEX, 0.3,
                            (255, 255, 255), 1)
    return np.concatenate([bev, panel], axis=1)


def _write_episode(route: Path, episode: int, seed: int, frames: int,
                   size: tuple[int, int]) -> None:
    # the same generators as tcp.py's tcp episode, so rgb/ and the poses are tcp's
    sim = base._simulate(np.random.default_rng([seed, episode]), frames)
    renderer = base._Renderer(size[0], size[1], np.random.default_rng([seed, episode, 1]))
    rng = np.random.default_rng([seed, episode, 30])
    projection = rng.normal(0.0, 1.0, (FEATURES, 6))
    for folder in FOLDERS:
        (route / folder).mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        name = f"{t:04d}"
        pose = (float(sim["x"][t]), float(sim["y"][t]), float(sim["theta"][t]))
        bgr = renderer.render(sim["road"], sim["s"][t], pose, "front")
        (route / "rgb" / f"{name}.png").write_bytes(sg.encode(".png", bgr, "rgb"))
        sup = supervision(sim, t, rng, projection)
        (route / "supervision" / f"{name}.npy").write_bytes(supervision_npy(sup))
        # the agent saves RGB with PIL; cv2 wants BGR for the same file
        (route / "bev" / f"{name}.png").write_bytes(
            sg.encode(".png", cv2.cvtColor(bev_render(sim, t, sup), cv2.COLOR_RGB2BGR), "bev"))
        with open(route / "measurements" / f"{name}.json", "w") as fh:
            json.dump(measurement(sim, t), fh, indent=4)


def synth_dataset(out_dir: str | Path, layout: str = "tcp_roach", episodes: int = 4,
                  frames: int = 40, seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` TCP route folders with Roach supervision (2 Hz, `frames` frames each)
    under out_dir and return them sorted.

    Same folders, poses and rgb/ images as tcp.py's "tcp" layout for the same arguments.
    image_size (height, width) of rgb/, default (256, 900). Byte-identical output for the same
    arguments; ValueError for bad arguments, FileExistsError if a route folder to be written
    already holds files (nothing is overwritten)."""
    size = base.writer_size(layout, "tcp_roach", episodes, frames, seed, image_size, ROACH_SIZE)
    routes = [tcp.route_dir(Path(out_dir), "tcp", ep) for ep in range(int(episodes))]
    return sg.write_routes("tcp_roach", out_dir, routes, lambda route, ep: _write_episode(
        route, ep, int(seed), int(frames), size), frames, size, progress)
