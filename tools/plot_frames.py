#!/usr/bin/env python3
"""Draw each project's ego-frame convention: docs/img/coordinates_*.png (docs/coordinates.md).

    python tools/plot_frames.py --out docs/img

One PNG per convention. Every metric panel shows the car from above with forward up the page
and its right to the right of the page (CARLA's world panel instead has north up), the frame's
origin and x/y axes, and the same three waypoints of a left curve (tests/reference.py
EXAMPLE_GARAGE) labelled with their coordinates in that frame, as `reference.convert` gives
them. Pixel panels show the BEV image grids where a project uses them: TransFuser 2022's LiDAR
histogram / target_point_image (8 px/m) and carla_garage's bounding-box pixels (4 px/m).

Before drawing, `check_against_reference` asserts that the axes drawn here put
reference.convert's numbers back on the car's points, and that the pixel maps agree with the
projects' own formulas (transcribed below). Matplotlib (Agg) is imported only to draw. The
output is deterministic for a given matplotlib (no timestamp or version in the PNG).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests import reference as ref  # noqa: E402

# --------------------------------------------------------------------------------------------
# the conventions, in the vehicle's physical (forward, right) metres
# --------------------------------------------------------------------------------------------

# name -> origin (f, r), x axis unit (f, r), y axis unit (f, r), axis captions
FRAME_AXES: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float], str, str]] = {
    "tcp": ((0.0, 0.0), (0.0, 1.0), (-1.0, 0.0), "x: right", "y: backward (forward = -y)"),
    "transfuser2022": ((ref.TF2022_LIDAR_POS[0], 0.0), (1.0, 0.0), (0.0, 1.0), "x: forward", "y: right"),
    "garage": ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), "x: forward", "y: right"),
    "b2d": ((0.0, 0.0), (1.0, 0.0), (0.0, -1.0), "x: forward", "y: left"),
}

TITLES = {
    "tcp": "TCP ego frame  (manifest: \"tcp\"; also \"transfuser2021\")",
    "transfuser2022": "TransFuser 2022 virtual-LiDAR frame  (\"transfuser2022\")",
    "garage": "carla_garage: CARLA vehicle frame  (\"garage\")",
    "b2d": "Bench2Drive ego frame  (\"b2d\")",
    "pixel transfuser2022": "TF-2022 LiDAR histogram / target_point_image, 256x256, 8 px/m",
    "pixel garage": "carla_garage BEV pixels (crop of the 256x256 grid), 4 px/m",
}

NOTES = {
    "tcp": ["TCP waypoints, target_point (TCP/data.py)",
            "TF-2021 waypoints, target_point (transfuser/data.py)",
            "TF-2022 target_point (team_code_transfuser/data.py)",
            "R = rot(pi/2 + theta), theta = compass; p' = R^T dp",
            "handedness: as CARLA (y 90 deg clockwise of x, from above)"],
    "transfuser2022": ["TF-2022 ego_waypoint (team_code_transfuser/data.py)",
                       "= (inv(M_t) M_t+i)[:2, 3] - (1.3, 0): CARLA axes,",
                       "origin at the virtual LiDAR 1.3 m ahead (utils.py)",
                       "its target_point is NOT here: that is \"tcp\"",
                       "handedness: as CARLA (left-handed)"],
    "garage": ["ego_waypoints, target_point, aim_wp, route, boxes",
               "(team_code/data.py; docs/coordinate_systems.md)",
               "wp = R_t^T (p_t+i - p_t), R = ego_matrix[:3, :3]",
               "x forward, y right, z up: left-handed"],
    "b2d": ["Bench2DriveZoo prepare_B2D.py: left2right = diag(1,-1,1,1)",
            "world2ego_rh = left2right @ world2ego @ left2right",
            "x forward, y left, z up: right-handed (nuScenes-like)",
            "reference only: no carla-wds layout stores it yet"],
    "pixel transfuser2022": ["lidar (2, 256, 256): rows 0..255 = 32..0 m ahead of the LiDAR,",
                             "cols 0..255 = 16 m left .. 16 m right (data.py lidar_to_histogram_features)",
                             "col = 128 + 8 y_right,  row = 256 - 8 (x_fwd - 1.3)",
                             "label (boxes): [col, row, w, h, yaw, speed, brake] in these pixels"],
    "pixel garage": ["lidar (1, 256, 256): [row, col] = [4 y + 128, 4 x + 128] (hist.T)",
                     "bounding_boxes[:, 0] = 4 y_right + 128 (row), [:, 1] = 4 x_fwd + 128 (col),",
                     "yaw negated (transfuser_utils.bb_vehicle_to_image_system)",
                     "forward = +col (page right), vehicle right = +row (page down)"],
}
# pixel panels: x limits, y limits (rows grow down the page), x and y axis captions
PIXEL_AXES = {
    "transfuser2022": ((-4, 260), (300, 90), "column (width)  ->  vehicle right",
                       "row (height), down  ->  backward"),
    "garage": ((96, 184), (160, 84), "column (width)  ->  vehicle forward", "row (height), down  ->  vehicle right"),
}

# pixel frames: (f, r) metres -> (col, row) pixels, as each project computes them
TF2022_PPM = 8.0      # team_code_transfuser/config.py pixels_per_meter
GARAGE_PPM = 4.0      # carla_garage team_code/config.py pixels_per_meter; min_x = min_y = -32


def tf2022_pixel(f, r):
    """TF-2022 LiDAR histogram (lidar_to_histogram_features: bins x in [-16, 16], y in [-32, 0]
    of the stored points, then rot90(-1)) and target_point_image: col = 128 + 8 r,
    row = 256 - 8 (f - 1.3). Row 0 is 32 m ahead of the LiDAR; the vehicle origin is off the
    bottom edge (row 266.4)."""
    f, r = np.asarray(f, dtype=np.float64), np.asarray(r, dtype=np.float64)
    return 128.0 + TF2022_PPM * r, 256.0 - TF2022_PPM * (f - ref.TF2022_LIDAR_POS[0])


def garage_pixel(f, r):
    """carla_garage BEV grid (lidar_to_histogram_features: hist over (x, y), transposed) and
    bounding_boxes (transfuser_utils.bb_vehicle_to_image_system): box[0] = 4 y + 128 is the row
    (height), box[1] = 4 x + 128 the column (width): forward = +col, right = +row."""
    f, r = np.asarray(f, dtype=np.float64), np.asarray(r, dtype=np.float64)
    return 128.0 + GARAGE_PPM * f, 128.0 + GARAGE_PPM * r


def _tf2022_draw_target_point(tp_tcp):
    """team_code_transfuser/data.py draw_target_point's arithmetic (tp in the TCP frame):
    tp[1] += 1.3; p = 8 tp; p[1] *= -1; p[1] = 256 - p[1]; p[0] += 128 -> cv2 (x=col, y=row)."""
    p = np.array(tp_tcp, dtype=np.float64).copy()
    p[1] += 1.3
    p = p * 8.0
    p[1] *= -1
    p[1] = 256 - p[1]
    p[0] += 128
    return p


def _tf2022_bevimage(pos_label_raw):
    """team_code_transfuser/utils.py get_lidar_to_bevimage_transform @ (x, y, 1) for a label_raw
    box position (forward - 1.3, left): -> (col, row)."""
    t = np.array([[0, -1, 16], [-1, 0, 32], [0, 0, 1]], dtype=np.float64)
    t[:2, :] *= 8
    return (t @ np.array([pos_label_raw[0], pos_label_raw[1], 1.0]))[:2]


def _garage_box_pixels(pos_garage):
    """transfuser_utils.bb_vehicle_to_image_system's position arithmetic: (4x, 4y) swapped,
    + (128, 128) -> (box[0], box[1]) = (row, col)."""
    b = np.array(pos_garage, dtype=np.float64) * GARAGE_PPM
    b = b[::-1]
    return b + np.array([32 * GARAGE_PPM, 32 * GARAGE_PPM])


def physical(frame: str, pts) -> np.ndarray:
    """Frame coordinates -> (f, r) metres, with the axes drawn in the pictures."""
    origin, ex, ey = (np.array(v) for v in FRAME_AXES[frame][:3])
    pts = np.asarray(pts, dtype=np.float64)
    return origin + pts[..., :1] * ex + pts[..., 1:2] * ey


def check_against_reference() -> None:
    """The drawn axes and pixel maps agree with reference.convert and the projects' formulas."""
    g = ref.EXAMPLE_GARAGE
    for frame in FRAME_AXES:
        np.testing.assert_allclose(physical(frame, ref.example_points(frame)), g, atol=1e-12)
        for probe in ([1.0, 0.0], [0.0, 1.0], [-2.5, 4.0]):
            np.testing.assert_allclose(physical(frame, ref.convert(probe, "garage", frame)), probe, atol=1e-12)
    for f, r in g:
        col, row = tf2022_pixel(f, r)
        np.testing.assert_allclose(_tf2022_draw_target_point(ref.convert([f, r], "garage", "tcp")),
                                   [col, row], atol=1e-9)
        np.testing.assert_allclose(_tf2022_bevimage([f - ref.TF2022_LIDAR_POS[0], -r]), [col, row], atol=1e-9)
        col, row = garage_pixel(f, r)
        np.testing.assert_allclose(_garage_box_pixels([f, r]), [row, col], atol=1e-12)


# --------------------------------------------------------------------------------------------
# drawing
# --------------------------------------------------------------------------------------------

CAR_LEN, CAR_WID = 4.6, 2.0
X_COLOR, Y_COLOR, WP_COLOR, CAR_COLOR = "#c0392b", "#1e8449", "#1f4e9c", "#7f8c8d"


def _car_outline():
    """Car polygon in (f, r): a box with a pointed nose."""
    h, w = CAR_LEN / 2, CAR_WID / 2
    return np.array([[-h, -w], [h - 0.8, -w], [h, 0.0], [h - 0.8, w], [-h, w]])


def _fmt(p) -> str:
    return "(" + ", ".join(f"{v:+.1f}".replace("+", "") if abs(v) >= 0.05 else "0.0" for v in p) + ")"


def _metric_panel(ax, frame: str) -> None:
    from matplotlib.patches import Polygon

    def page(fr):   # (f, r) -> page (u, v) = (r, f)
        fr = np.asarray(fr, dtype=np.float64)
        return fr[..., 1], fr[..., 0]

    ax.set_aspect("equal")
    ax.set_xlim(-7.5, 6.0)
    ax.set_ylim(-4.5, 13.5)
    ax.grid(True, color="#dddddd", lw=0.6)
    ax.set_xlabel("vehicle right (m)  ->", fontsize=8)
    ax.set_ylabel("vehicle forward (m)  ->", fontsize=8)
    ax.tick_params(labelsize=7)
    car = _car_outline()
    u, v = page(car)
    ax.add_patch(Polygon(np.stack([u, v], 1), closed=True, fc="#ecf0f1", ec=CAR_COLOR, lw=1.2))
    ax.plot([0], [0], "o", color=CAR_COLOR, ms=4)
    ax.annotate("vehicle origin", (0, 0), xytext=(6, -10), textcoords="offset points", fontsize=7, color=CAR_COLOR)
    origin, ex, ey, xcap, ycap = FRAME_AXES[frame]
    ou, ov = page(origin)
    if frame == "transfuser2022":
        ax.plot([ou], [ov], "s", color="k", ms=4)
        ax.annotate("virtual LiDAR\n(1.3, 0, 2.5) m", (ou, ov), xytext=(-6, -4), textcoords="offset points",
                    fontsize=7, ha="right", va="top", zorder=4)
    for axis, cap, color in ((ex, xcap, X_COLOR), (ey, ycap, Y_COLOR)):
        du, dv = page(np.array(axis) * 3.0)
        ax.annotate("", xy=(ou + du, ov + dv), xytext=(ou, ov), zorder=4,
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=2.0, mutation_scale=14))
        ax.annotate(cap, (ou + du, ov + dv), xytext=(4 if du >= 0 else -4, 4 if dv >= 0 else -10),
                    textcoords="offset points", fontsize=8, color=color, ha="left" if du >= 0 else "right",
                    zorder=4)
    pts = ref.example_points(frame)
    phys = physical(frame, pts)
    u, v = page(phys)
    ax.plot(np.r_[0.0, u], np.r_[0.0, v], "--", color=WP_COLOR, lw=0.8)
    ax.plot(u, v, "o", color=WP_COLOR, ms=5)
    for i, (uu, vv) in enumerate(zip(u, v)):
        ax.annotate(f"wp{i + 1} {_fmt(pts[i])}", (uu, vv), xytext=(-8, -2), textcoords="offset points",
                    fontsize=8, color=WP_COLOR, ha="right", va="center")
    ax.set_title(TITLES[frame], fontsize=9)
    ax.text(0.98, 0.955, "\n".join(NOTES[frame]), transform=ax.transAxes, fontsize=6.5, ha="right", va="top",
            bbox=dict(fc="white", ec="#bbbbbb", lw=0.6))
    ax.text(0.02, 0.99, "seen from above; labels = coordinates in this frame (m)", transform=ax.transAxes,
            fontsize=6.5, va="top", color="#555555")


def _pixel_grid(ax, to_px):
    """The 256x256 grid, the car, its origin and the example waypoints, in pixels:
    (origin col, origin row, waypoint cols, waypoint rows)."""
    from matplotlib.patches import Polygon, Rectangle

    ax.set_aspect("equal")
    ax.add_patch(Rectangle((0, 0), 256, 256, fc="#f7f9fb", ec="k", lw=1.0))
    for k in range(0, 257, 32):
        ax.plot([k, k], [0, 256], color="#e3e3e3", lw=0.5, zorder=0.5)
        ax.plot([0, 256], [k, k], color="#e3e3e3", lw=0.5, zorder=0.5)
    car = _car_outline()
    col, row = to_px(car[:, 0], car[:, 1])
    ax.add_patch(Polygon(np.stack([col, row], 1), closed=True, fc="#ecf0f1", ec=CAR_COLOR, lw=1.2, zorder=2))
    c0, r0 = to_px(0.0, 0.0)
    ax.plot([c0], [r0], "o", color=CAR_COLOR, ms=4, zorder=3)
    g = ref.EXAMPLE_GARAGE
    col, row = to_px(g[:, 0], g[:, 1])
    ax.plot(np.r_[c0, col], np.r_[r0, row], "--", color=WP_COLOR, lw=0.8, zorder=3)
    ax.plot(col, row, "o", color=WP_COLOR, ms=5, zorder=4)
    return c0, r0, col, row


def _tf2022_pixel_labels(ax, to_px, c0, r0, col, row) -> None:
    """TF-2022's LiDAR mark and labels."""
    cl, rl = to_px(ref.TF2022_LIDAR_POS[0], 0.0)
    ax.plot([cl], [rl], "s", color="k", ms=4, zorder=4)
    ax.annotate("LiDAR (128, 256)", (cl, rl), xytext=(8, 8), textcoords="offset points", fontsize=7)
    ax.annotate("vehicle origin (128, 266.4)", (c0, r0), xytext=(10, -2), textcoords="offset points",
                fontsize=7, color=CAR_COLOR, va="center")
    for i, (c, r) in enumerate(zip(col, row)):
        ax.annotate(f"wp{i + 1} (col {c:.1f}, row {r:.1f})", (c, r), xytext=(-8, 0),
                    textcoords="offset points", fontsize=7.5, color=WP_COLOR, ha="right", va="center")


def _garage_pixel_labels(ax, to_px, c0, r0, col, row) -> None:
    """carla_garage's labels, and the waypoints' pixels listed in a corner."""
    ax.annotate("vehicle (row 128, col 128)", (c0, r0), xytext=(0, -14), textcoords="offset points",
                fontsize=7, color=CAR_COLOR, ha="center", va="top")
    for i, (c, r) in enumerate(zip(col, row)):
        ax.annotate(f"wp{i + 1}", (c, r), xytext=(0, 6), textcoords="offset points", fontsize=7.5,
                    color=WP_COLOR, ha="center", va="bottom")
    ax.text(0.02, 0.02, "\n".join(f"wp{i + 1}: row {r:.1f}, col {c:.1f}" for i, (c, r) in enumerate(zip(col, row))),
            transform=ax.transAxes, fontsize=7, color=WP_COLOR, va="bottom",
            bbox=dict(fc="white", ec="#bbbbbb", lw=0.6))


def _pixel_panel(ax, project: str) -> None:
    to_px = tf2022_pixel if project == "transfuser2022" else garage_pixel
    c0, r0, col, row = _pixel_grid(ax, to_px)
    xlim, ylim, xlabel, ylabel = PIXEL_AXES[project]
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    labels = _tf2022_pixel_labels if project == "transfuser2022" else _garage_pixel_labels
    labels(ax, to_px, c0, r0, col, row)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(TITLES[f"pixel {project}"], fontsize=9)
    ax.text(0.98, 0.98, "\n".join(NOTES[f"pixel {project}"]), transform=ax.transAxes, fontsize=6.3, ha="right",
            va="top", bbox=dict(fc="white", ec="#bbbbbb", lw=0.6), zorder=5)


WORLD_POS, WORLD_YAW = (10.0, 20.0), -45.0   # heading north-east


def _world_page(xy):   # world (x east, y south) -> page (u, v) = (x, -y): north up
    xy = np.asarray(xy, dtype=np.float64)
    return xy[..., 0], -xy[..., 1]


def _world_axes_arrows(ax) -> None:
    """World x, y and north, drawn at a corner, and the handedness note."""
    a = np.array([3.8, 14.5])
    for d, cap, color in (((1, 0), "world x (east)", X_COLOR), ((0, 1), "world y (south)", Y_COLOR),
                          ((0, -1), "north = -y (compass 0)", "k")):
        du, dv = _world_page(np.array(d) * 2.5)
        au, av = _world_page(a)
        ax.annotate("", xy=(au + du, av + dv), xytext=(au, av),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=1.8, mutation_scale=12))
        ax.annotate(cap, (au + du, av + dv), xytext=(3, 3 if dv >= 0 else -10), textcoords="offset points",
                    fontsize=7.5, color=color)
    au, av = _world_page(a)
    ax.annotate("z up (out of the page):\nleft-handed", (au, av), xytext=(12, -34), textcoords="offset points",
                fontsize=6.5, color="#555555")


def _world_notes(ax) -> None:
    compass = math.radians(WORLD_YAW) + math.pi / 2
    notes = [f"yaw = {WORLD_YAW:.0f} deg (from +x toward +y; + = right turn)",
             f"compass theta = yaw + 90 deg = {math.degrees(compass):.0f} deg (TCP/TF 'theta')",
             f"garage theta = yaw in rad = {math.radians(WORLD_YAW):.3f}",
             f"B2D ego_yaw = pi/2 - compass = {math.degrees(math.pi / 2 - compass):.0f} deg (right-handed)",
             "TCP/TF x, y = scaled GNSS (north, east) = (-y, x)",
             "ego_matrix = Transform.get_matrix(): world <- vehicle"]
    ax.text(0.98, 0.02, "\n".join(notes), transform=ax.transAxes, fontsize=6.5, ha="right", va="bottom",
            bbox=dict(fc="white", ec="#bbbbbb", lw=0.6))


def _world_panel(ax) -> None:
    from matplotlib.patches import Polygon

    rot = np.array(ref.carla_matrix(0, 0, 0, WORLD_YAW))[:2, :2]   # world = R @ (f, r) + p
    pos = np.array(WORLD_POS)
    ax.set_aspect("equal")
    ax.set_xlim(2.0, 22.0)
    ax.set_ylim(-28.0, -9.0)
    ax.grid(True, color="#dddddd", lw=0.6)
    ax.tick_params(labelsize=7)
    ax.set_xlabel("world x (m)  ->  east", fontsize=8)
    ax.set_ylabel("-(world y) (m)  ->  north", fontsize=8)
    car = _car_outline() @ rot.T + pos
    u, v = _world_page(car)
    ax.add_patch(Polygon(np.stack([u, v], 1), closed=True, fc="#ecf0f1", ec=CAR_COLOR, lw=1.2))
    pu, pv = _world_page(pos)
    ax.plot([pu], [pv], "o", color=CAR_COLOR, ms=4)
    ax.annotate(f"vehicle at ({pos[0]:.0f}, {pos[1]:.0f})", (pu, pv), xytext=(8, -12), textcoords="offset points",
                fontsize=7, color=CAR_COLOR)
    _world_axes_arrows(ax)
    # heading arrow
    fu, fv = _world_page(pos + rot @ np.array([3.5, 0.0]))
    ax.annotate("", xy=(fu, fv), xytext=(pu, pv), arrowprops=dict(arrowstyle="-|>", color="#8e44ad", lw=1.5))
    world = ref.EXAMPLE_GARAGE @ rot.T + pos
    u, v = _world_page(world)
    ax.plot(np.r_[pu, u], np.r_[pv, v], "--", color=WP_COLOR, lw=0.8)
    ax.plot(u, v, "o", color=WP_COLOR, ms=5)
    for i, (uu, vv) in enumerate(zip(u, v)):
        ax.annotate(f"wp{i + 1} {_fmt(world[i])}", (uu, vv), xytext=(-8, 2), textcoords="offset points",
                    fontsize=8, color=WP_COLOR, ha="right", va="bottom")
    _world_notes(ax)
    ax.set_title("CARLA world (left-handed), north up", fontsize=9)


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "img"), help="output folder (docs/img)")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    check_against_reference()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plt.rcParams.update({"font.family": "DejaVu Sans", "path.simplify": True})
    jobs = [("tcp", [("metric", "tcp")]),
            ("transfuser2022", [("metric", "transfuser2022"), ("pixel", "transfuser2022")]),
            ("garage", [("metric", "garage"), ("pixel", "garage")]),
            ("b2d", [("metric", "b2d")]),
            ("world", [("world", None)])]
    written = []
    for name, panels in jobs:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 5.8), squeeze=False)
        for ax, (kind, frame) in zip(axes[0], panels):
            if kind == "metric":
                _metric_panel(ax, frame)
            elif kind == "pixel":
                _pixel_panel(ax, frame)
            else:
                _world_panel(ax)
        fig.tight_layout()
        path = out / f"coordinates_{name}.png"
        fig.savefig(path, dpi=args.dpi, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


if __name__ == "__main__":
    for p in main():
        print(f"{p}  {p.stat().st_size // 1024} KiB")
