"""The report's pictures: cameras with the boxes projected onto them, the bird's-eye panel,
and the label histograms, each encoded in memory (JPEG or PNG bytes) for the page to inline.

Bird's-eye points are (right, forward) metres from the vehicle origin, forward up the page:
the per-layout frames go through carla_wds.train.frames (the map `show` draws with), so a
layout's own axes (TCP's (right, -forward), garage's and Bench2Drive's (forward, right)) are
converted by the one table in carla_wds.datasets, never by a rule of this module.
"""
from __future__ import annotations

import functools
import io
from typing import TYPE_CHECKING, Any, Callable

import cv2
import numpy as np

from ..modalities.boxes import BOX_CLASSES
from ..modalities.calibration import project

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 80
BEV_HALF_M = 24.0          # the panel shows +-this many metres around the ego, at least
BEV_MAX_HALF_M = 60.0      # and never more, so a far target point cannot shrink the scene
MAX_LIDAR_POINTS = 4000    # drawn per panel (evenly strided), enough to see the scene
_EGO = BOX_CLASSES["ego"]
_CLASS_COLOURS = {BOX_CLASSES["car"]: "tab:orange", BOX_CLASSES["walker"]: "tab:purple",
                  BOX_CLASSES["traffic_light"]: "tab:red", BOX_CLASSES["stop_sign"]: "tab:brown",
                  BOX_CLASSES["traffic_sign"]: "tab:olive"}
_CLASS_NAMES = {v: k.replace("_", " ") for k, v in BOX_CLASSES.items()}
_CLASS_BGR = {BOX_CLASSES["car"]: (0, 140, 255), BOX_CLASSES["walker"]: (180, 60, 150)}
# the 12 edges of a box as pairs of corner indices (corners(): x-major, then y, then z)
_EDGES = ((0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5),
          (2, 6), (3, 7))


def plain_text(draw: Callable[..., Any]) -> Callable[..., Any]:
    """`draw` with every text matplotlib makes taken literally: route, scenario and skip
    reason names come from the shards, and a `$...$` in one would be parsed as mathtext
    (aborting the report on a bad expression), or as TeX where the user's matplotlibrc sets
    usetex. The settings are read when texts are made and drawn, both inside `draw`."""
    @functools.wraps(draw)
    def drawn(*args: Any, **kw: Any) -> Any:
        import matplotlib
        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            return draw(*args, **kw)
    return drawn


def _figure(size: tuple[float, float]) -> Figure:
    from matplotlib.figure import Figure   # the object API: no global backend state
    return Figure(figsize=size, dpi=DPI)


def png_of(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def corners(row: np.ndarray) -> np.ndarray:
    """(8, 3) corners of a box-table row (class, x, y, z, half extents, yaw, ...) in the
    frame its row is in (x-major, then y, then z: the order _EDGES joins)."""
    x, y, z, hx, hy, hz, yaw = (float(v) for v in row[1:8])
    sx, sy, sz = np.meshgrid([-1, 1], [-1, 1], [-1, 1], indexing="ij")
    lx, ly = sx.ravel() * hx, sy.ravel() * hy
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([x + c * lx - s * ly, y + s * lx + c * ly, z + sz.ravel() * hz], axis=1)


def camera_jpeg(image: np.ndarray, boxes_fwd_right: list[tuple[int, np.ndarray]] | None = None,
                k: np.ndarray | None = None, cam2ego: np.ndarray | None = None,
                quality: int = 85) -> bytes:
    """(3, H, W) RGB uint8 -> JPEG bytes; with calibration, each box's 12 edges drawn where
    its 8 corners ((forward, right, up) ego metres, the axes `project` takes) lie in front."""
    bgr = np.ascontiguousarray(image.transpose(1, 2, 0)[:, :, ::-1])
    if boxes_fwd_right and k is not None and cam2ego is not None:
        for cls, pts in boxes_fwd_right:
            uvz = project(pts, k.astype(np.float64), cam2ego.astype(np.float64))
            if not (uvz[:, 2] > 0.5).all():
                continue    # a box behind or beside the camera has no honest 2D outline
            uv = np.round(uvz[:, :2]).astype(np.int32)
            for a, b in _EDGES:
                cv2.line(bgr, tuple(map(int, uv[a])), tuple(map(int, uv[b])),
                         _CLASS_BGR.get(cls, (0, 220, 220)), 1, cv2.LINE_AA)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"could not encode a {image.shape} camera image as JPEG")
    return buf.tobytes()


def bev_half(points: list[np.ndarray]) -> float:
    """Half side (m) of the square panels: every sample's waypoints and target point in view,
    within bounds. The report passes all its samples' points, so every panel has one scale."""
    reach = max((float(np.abs(p).max()) for p in points if p.size), default=0.0)
    return float(np.clip(reach * 1.15, BEV_HALF_M, BEV_MAX_HALF_M))


def _clip_to(p: np.ndarray, half: float) -> tuple[np.ndarray, bool]:
    """The point, or where the ray from the ego to it leaves the panel (bearing kept)."""
    m = float(np.abs(p).max())
    return (p, False) if m <= half else (p * (0.95 * half / m), True)


def _scene(ax: Axes, bev: dict[str, Any]) -> None:
    """LiDAR points, boxes (footprints) and route under the labels."""
    lidar = bev.get("lidar")
    if lidar is not None and len(lidar):
        step = max(1, len(lidar) // MAX_LIDAR_POINTS)
        ax.scatter(lidar[::step, 0], lidar[::step, 1], s=0.4, c="0.55", lw=0, label="LiDAR")
    named: set[str] = set()
    for cls, foot in bev.get("boxes", []):
        ring = np.vstack([foot, foot[:1]])
        name = _CLASS_NAMES.get(cls, "other box")   # each class once in the legend, by colour
        ax.plot(ring[:, 0], ring[:, 1], color=_CLASS_COLOURS.get(cls, "tab:cyan"), lw=1.0,
                label=None if name in named else name)
        named.add(name)
    route = bev.get("route")
    if route is not None and len(route):
        ax.plot(route[:, 0], route[:, 1], ":", color="tab:blue", lw=1.2, label="route")


def _metre_axes(ax: Axes, half: float) -> None:
    """A square (right, forward) metre view of +-half around the ego, forward up."""
    ax.set_xlim(-half, half)
    ax.set_ylim(-half, half)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("right [m]", fontsize=8)
    ax.set_ylabel("forward [m]", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


@plain_text
def bev_png(bev: dict[str, Any], title: str, half: float | None = None) -> tuple[bytes, list[str]]:
    """The bird's-eye panel of one sample and its legend's labels: `bev` holds (right,
    forward) arrays: waypoints (P, 2), target (2,), and optionally route (R, 2), lidar (N, 2),
    boxes [(class, (4, 2))]; `half` (m) the panel's half side (else fitted to this sample)."""
    fig = _figure((3.4, 3.4))
    ax = fig.add_axes((0.16, 0.13, 0.8, 0.78))
    wp, tgt = bev["waypoints"], bev["target"]
    half = bev_half([wp, tgt]) if half is None else half
    _scene(ax, bev)
    ax.plot(wp[:, 0], wp[:, 1], "-o", color="tab:green", ms=3, lw=1.5, label="waypoints")
    shown, clipped = _clip_to(tgt, half)
    ax.plot(*shown, marker="*", ms=11, color="tab:blue", mfc="none" if clipped else "tab:blue",
            ls="", label="target" + (" (off view)" if clipped else ""))
    ax.plot(0, 0, marker="^", ms=9, color="black", ls="", label="ego")
    _metre_axes(ax, half)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6, loc="lower right", framealpha=0.7)
    return png_of(fig), ax.get_legend_handles_labels()[1]


@plain_text
def bars_png(title: str, counts: dict[str, int], xlabel: str = "samples") -> bytes:
    """A horizontal bar chart of `counts` (largest first), each bar labelled with its count."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:25]
    height = 1.0 + 0.28 * max(1, len(items))   # inches: 0.45 below the bars, 0.35 above
    fig = _figure((4.6, height))
    ax = fig.add_axes((0.38, 0.45 / height, 0.55, 1 - 0.8 / height))
    if not items:
        ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        names = [n if len(n) <= 34 else n[:33] + "…" for n, _ in items][::-1]
        values = [v for _, v in items][::-1]
        ax.barh(names, values, color="tab:blue")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v}", va="center", fontsize=7)
        ax.set_xlim(0, max(values) * 1.2)
        ax.tick_params(labelsize=7)
        ax.set_xlabel(xlabel, fontsize=8)
    fig.suptitle(title, fontsize=9, x=0.02, ha="left")
    return png_of(fig)


@plain_text
def speed_png(speeds: np.ndarray) -> bytes:
    """The speeds' histogram (m/s), bins of 0.5 m/s."""
    fig = _figure((4.6, 2.4))
    ax = fig.add_axes((0.14, 0.2, 0.82, 0.68))
    top = max(1.0, float(np.ceil(speeds.max() * 2) / 2)) if speeds.size else 1.0
    ax.hist(speeds, bins=np.arange(0.0, top + 0.5, 0.5), color="tab:blue")
    ax.set_xlabel("speed [m/s]", fontsize=8)
    ax.set_ylabel("samples", fontsize=8)
    ax.tick_params(labelsize=7)
    fig.suptitle(f"speeds ({speeds.size} samples)", fontsize=9, x=0.02, ha="left")
    return png_of(fig)


@plain_text
def ends_png(ends: np.ndarray) -> bytes:
    """Every sample's last waypoint, (N, 2) (right, forward) metres: where the pack drives."""
    fig = _figure((3.4, 3.4))
    ax = fig.add_axes((0.18, 0.14, 0.76, 0.74))
    ax.scatter(ends[:, 0], ends[:, 1], s=4, alpha=0.5, color="tab:green", lw=0)
    ax.plot(0, 0, marker="^", ms=8, color="black", ls="")
    reach = max(1.0, float(np.abs(ends).max()) * 1.1) if ends.size else 1.0
    _metre_axes(ax, reach)
    fig.suptitle(f"last waypoints ({len(ends)} samples)", fontsize=9, x=0.02, ha="left")
    return png_of(fig)


@plain_text
def controls_png(controls: np.ndarray) -> bytes:
    """Histograms of the expert's (N, 3) steer, throttle and brake."""
    fig = _figure((4.6, 2.2))
    for j, (name, lo) in enumerate((("steer", -1.0), ("throttle", 0.0), ("brake", 0.0))):
        ax = fig.add_axes((0.08 + j * 0.32, 0.22, 0.26, 0.62))
        ax.hist(np.clip(controls[:, j], lo, 1.0), bins=np.linspace(lo, 1.0, 11), color="tab:blue")
        ax.set_xlabel(name, fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"expert controls ({len(controls)} samples)", fontsize=9, x=0.02, ha="left")
    return png_of(fig)
