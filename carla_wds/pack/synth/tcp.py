"""Synthetic routes in the raw TCP and TransFuser-CVPR2021 (transfuser4) on-disk layouts.

Both draw the shared world (world.py) at 2 Hz; TCP writes one front camera and its
target-point measurements, transfuser4 four cameras and the hazard flags.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import cv2
import numpy as np
from ...progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ...words import counted

from . import world

logger = logging.getLogger(__name__)

LAYOUT_CAMERAS: dict[str, dict[str, str]] = {
    "tcp": {"front": "rgb"},
    "transfuser4": {"front": "rgb_front", "rear": "rgb_rear", "left": "rgb_left",
                    "right": "rgb_right"},
}
# (height, width) of the real sensors, as image_size is given
DEFAULT_IMAGE_SIZE: dict[str, tuple[int, int]] = {"tcp": (256, 900), "transfuser4": (300, 400)}


def measurement(layout: str, sim: dict, t: int) -> dict:
    num = {k: float(sim[k][t]) for k in ("x", "y", "theta", "speed")}
    steer, throttle, brake = (float(v) for v in sim["controls"][t])
    tx, ty = (float(v) for v in sim["target"][t])
    cmd = int(sim["command"][t])
    if layout == "tcp":
        return {**num, "x_target": tx, "y_target": ty, "target_command": cmd, "steer": steer,
                "throttle": throttle, "brake": brake, "command": cmd}
    hazard = str(sim["hazard"][t])
    return {**num, "x_command": tx, "y_command": ty, "command": cmd, "steer": steer,
            "throttle": throttle, "brake": brake, "junction": bool(sim["junction"][t]),
            **{f"{h}_hazard": hazard == h for h in ("vehicle", "light", "walker", "stop_sign")}}


def route_dir(out_dir: Path, layout: str, episode: int) -> Path:
    town = episode % 5 + 1
    if layout == "tcp":
        return out_dir / f"Town{town:02d}" / f"routes_town{town:02d}_{episode:02d}"
    return out_dir / f"Town{town:02d}_tiny" / f"routes_{episode:02d}"


def _write_episode(route: Path, layout: str, episode: int, seed: int, frames: int,
                   size: tuple[int, int]) -> None:
    sim = world._simulate(np.random.default_rng([seed, episode]), frames)
    renderer = world._Renderer(size[0], size[1], np.random.default_rng([seed, episode, 1]))
    cameras = LAYOUT_CAMERAS[layout]
    for folder in [*cameras.values(), "measurements"]:
        (route / folder).mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        pose = (float(sim["x"][t]), float(sim["y"][t]), float(sim["theta"][t]))
        for camera, folder in cameras.items():
            ok, png = cv2.imencode(".png", renderer.render(sim["road"], sim["s"][t], pose, camera))
            if not ok:
                raise RuntimeError(f"cv2 could not encode {route}/{folder}/{t:04d}.png")
            (route / folder / f"{t:04d}.png").write_bytes(png.tobytes())
        with open(route / "measurements" / f"{t:04d}.json", "w") as fh:
            json.dump(measurement(layout, sim, t), fh, indent=4)


def synth_dataset(out_dir: str | Path, layout: str = "tcp", episodes: int = 4, frames: int = 40,
                  seed: int = 0, image_size: tuple[int, int] | None = None,
                  progress: bool = True) -> list[Path]:
    """Write `episodes` route folders under out_dir and return them sorted.

    layout: "tcp" (Town0K/routes_town0K_<ep>/rgb, measurements) or "transfuser4"
    (Town0K_tiny/routes_<ep>/rgb_front, rgb_rear, rgb_left, rgb_right, measurements); K cycles
    1..5. Each route has `frames` frames named %04d from 0, at 2 Hz. image_size is
    (height, width), default the real sensor size (DEFAULT_IMAGE_SIZE). Output is byte-identical
    for the same arguments. Raises ValueError for bad arguments and FileExistsError if a route
    folder to be written already holds files (nothing is overwritten or deleted).
    The other layouts have their own writers (garage.py, transfuser2022.py, roach.py, ...).
    """
    if layout not in LAYOUT_CAMERAS:
        raise ValueError(f"this writer writes layouts {sorted(LAYOUT_CAMERAS)}, not {layout!r}")
    size = world.draw_size(episodes, frames, seed, image_size, DEFAULT_IMAGE_SIZE[layout])
    routes = [route_dir(Path(out_dir), layout, ep) for ep in range(int(episodes))]
    busy = [str(r) for r in routes if r.is_dir() and any(r.iterdir())]
    if busy:
        raise FileExistsError(f"route folders already hold files: {busy[:3]}; "
                              "choose an empty out_dir or remove them")
    for ep, route in enumerate(progress_bar(routes, desc=f"synth {layout}", unit="route",
                                    disable=not progress)):
        _write_episode(route, layout, ep, int(seed), int(frames), size)
    logger.info("wrote %s of %s (%dx%d, HxW) under %s", counted(len(routes), f"{layout} route"),
                counted(frames, "frame"), size[1], size[0], out_dir)   # size: (width, height)
    return sorted(routes)
