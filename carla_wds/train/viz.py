"""Training curves and prediction montages as PNG files.

Uses matplotlib's object API (``Figure`` + Agg) rather than pyplot, so nothing
touches global backend state and it is safe in headless workers and threads.

Ego-frame convention (TCP's): x is lateral, forward is -y. Bird's-eye panels
plot (x, -y) so forward points up.
"""

from __future__ import annotations

import io
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..fileio import atomic_write_bytes
from ..schema import COMMAND_NAMES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

DPI: int = 100
CURVES_FIGSIZE: tuple[float, float] = (12.0, 4.5)
ROW_HEIGHT_IN: float = 3.0
_LEGEND_IN: float = 1.2
_MAX_CAM_ASPECT: float = 3.0
_BEV_MIN_SPAN_M: float = 8.0
# Beyond this many times the waypoint span, the target point would squash the
# trajectory into a few pixels, so it is drawn clipped at the panel edge.
_TARGET_MAX_ZOOM_OUT: float = 2.0

_TRAIN_KEYS = ("step", "loss")
_EVAL_KEYS = ("step", "ade", "fde", "baseline_ade", "baseline_fde")


def _new_figure(figsize: tuple[float, float]) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, dpi=DPI)


def _save_atomic(fig: Figure, out: str | Path) -> Path:
    """Write ``fig`` to ``out`` via a temp file in the same dir, so readers never see a partial PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return atomic_write_bytes(out, buf.getvalue())


def _valid_record(rec: Any) -> str | None:
    """Return the record kind if ``rec`` is a usable train/eval record, else None."""
    if not isinstance(rec, dict):
        return None
    kind = rec.get("kind")
    keys = {"train": _TRAIN_KEYS, "eval": _EVAL_KEYS}.get(kind)
    if keys is None:
        return None
    for k in keys:
        v = rec.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
    return kind


def read_metrics(path: str | Path) -> tuple[list[dict], list[dict]]:
    """Parse metrics.jsonl into (train, eval) records sorted by step.

    When a step appears twice (a run resumed from an earlier checkpoint
    re-logs it) the later line wins.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"metrics file not found: {path}")
    by_kind: dict[str, dict[int, dict]] = {"train": {}, "eval": {}}
    n_bad = n_lines = 0
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            n_lines += 1
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = None
            kind = _valid_record(rec)
            if kind is None:
                n_bad += 1
                continue
            by_kind[kind][int(rec["step"])] = rec
    if n_bad:
        logger.warning("%s: skipped %d malformed line(s) of %d", path, n_bad, n_lines)
    train = [by_kind["train"][s] for s in sorted(by_kind["train"])]
    evals = [by_kind["eval"][s] for s in sorted(by_kind["eval"])]
    if not train and not evals:
        raise ValueError(f"no valid train/eval records in {path} ({n_lines} non-empty lines)")
    return train, evals


# Weight of the past in the loss curve's EMA: a log window's loss is one batch's, noisy enough
# that the trend is hidden at a few hundred steps; 0.9 spans about ten windows.
EMA_WEIGHT: float = 0.9


def ema(values: list[float], weight: float = EMA_WEIGHT) -> list[float]:
    """Exponential moving average, bias-corrected so the first points are not pulled to 0."""
    out, acc = [], 0.0
    for i, v in enumerate(values, start=1):
        acc = weight * acc + (1 - weight) * v
        out.append(acc / (1 - weight ** i))
    return out


def epoch_ends(records: list[dict]) -> dict[int, int]:
    """Epoch -> the last step logged in it (train or eval records; an eval record's step is its
    epoch's end exactly, a train record's within log_every of it)."""
    ends: dict[int, int] = {}
    for r in records:
        e = r.get("epoch")
        if isinstance(e, int) and not isinstance(e, bool):
            ends[e] = max(ends.get(e, r["step"]), r["step"])
    return dict(sorted(ends.items()))


def _epoch_axis(ax: Axes, ends: dict[int, int]) -> None:
    """An epoch scale on top of a step axis: a tick (and a faint line) at each epoch's end."""
    if not ends:
        return
    top = ax.secondary_xaxis("top")
    top.set_xticks([0, *ends.values()], labels=["0", *(str(e + 1) for e in ends)])
    top.set_xlabel("epoch", fontsize=8)
    top.tick_params(labelsize=8)
    for step in ends.values():
        ax.axvline(step, color="0.6", lw=0.6, ls=":", zorder=0)


def _plot_loss(ax: Axes, train: list[dict]) -> None:
    ax.set_title("train loss (faint: each log window; bold: EMA)")
    ax.set_xlabel("step")
    if not train:
        ax.text(0.5, 0.5, "no train records", ha="center", va="center", transform=ax.transAxes)
        return
    steps = [r["step"] for r in train]
    loss = [r["loss"] for r in train]
    ax.plot(steps, loss, color="tab:blue", lw=0.8, alpha=0.3, label="loss")
    if all(math.isfinite(v) for v in loss):
        ax.plot(steps, ema(loss), color="tab:blue", lw=1.8, label=f"EMA ({EMA_WEIGHT})")
    # Log scale only when valid; a zero/negative loss would blank the axis.
    if all(v > 0 and math.isfinite(v) for v in loss):
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _plot_ade_fde(ax: Axes, evals: list[dict]) -> None:
    ax.set_title("eval: ADE / FDE (dashed = baseline)")
    ax.set_xlabel("step")
    ax.set_ylabel("metres")
    if not evals:
        ax.text(0.5, 0.5, "no eval records", ha="center", va="center", transform=ax.transAxes)
        return
    steps = [r["step"] for r in evals]
    for name, color in (("ade", "tab:green"), ("fde", "tab:red")):
        ax.plot(steps, [r[name] for r in evals], color=color, marker="o", ms=3, label=f"model {name.upper()}")
        ax.plot(steps, [r[f"baseline_{name}"] for r in evals], color=color, ls="--",
                label=f"baseline {name.upper()}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def run_title(run_dir: Path) -> str:
    """The run's name (run_dir's last two parts: `runs/demo/run`, not `run`) and, from its
    config.json, what it trained: backbone, prior, data, epochs, batch and learning rate."""
    name = "/".join(run_dir.resolve().parts[-2:])
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
        data, model, optim = cfg["data"], cfg["model"], cfg["optim"]
        train = data.get("mix") or data["train"]
        return (f"{name}: {model['backbone']} ({model['prior']} prior) on "
                f"{Path(str(train)).name}, {cfg['epochs']} epochs of batch {data['batch_size']}, "
                f"lr {optim['lr']:g}")
    except (OSError, ValueError, KeyError, TypeError):   # plotting a bare metrics.jsonl
        return name


def curves_figure(run_dir: str | Path) -> Figure:
    """The figure plot_run writes: loss (raw and smoothed) and ADE/FDE against step and epoch."""
    run_dir = Path(run_dir)
    train, evals = read_metrics(run_dir / "metrics.jsonl")
    fig = _new_figure(CURVES_FIGSIZE)
    ax_loss, ax_eval = fig.subplots(1, 2)
    _plot_loss(ax_loss, train)
    _plot_ade_fde(ax_eval, evals)
    ends = epoch_ends(train + evals)
    for ax in (ax_loss, ax_eval):
        _epoch_axis(ax, ends)
    fig.suptitle(run_title(run_dir), fontsize=11)
    fig.tight_layout()
    return fig


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Read run_dir/metrics.jsonl and write loss and ADE/FDE curves to a PNG (default run_dir/curves.png)."""
    fig = curves_figure(run_dir)
    return _save_atomic(fig, out if out is not None else Path(run_dir) / "curves.png")


def _to_hwc_uint8(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim != 3 or img.shape[0] != 3:
        raise ValueError(f"camera image must be (3, H, W), got {img.shape}")
    img = img.transpose(1, 2, 0)
    if img.dtype == np.uint8:
        return img
    # Tolerate float images in [0, 1] or [0, 255] so debugging callers don't have to convert.
    scale = 255.0 if float(np.nanmax(img)) <= 1.0 else 1.0
    return np.clip(np.nan_to_num(img * scale), 0, 255).astype(np.uint8)


def _bev_limits(points: np.ndarray) -> tuple[float, float, float, float, float]:
    """Square (x0, x1, y0, y1) box around plot-space points, plus its half side."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    centre = (lo + hi) / 2.0
    half = max(float((hi - lo).max()) * 0.6, _BEV_MIN_SPAN_M / 2.0)
    return centre[0] - half, centre[0] + half, centre[1] - half, centre[1] + half, half


def _plot_target(ax: Axes, tgt: np.ndarray, box: tuple[float, float, float, float]) -> None:
    x0, x1, y0, y1 = box
    if not np.isfinite(tgt).all():
        logger.warning("non-finite target point %s not drawn", tgt)
        return
    if x0 <= tgt[0] <= x1 and y0 <= tgt[1] <= y1:
        ax.plot(*tgt, marker="*", ms=12, color="tab:blue", ls="", label="target")
        return
    # Pull the marker along the ray from the ego (origin, always in view) to
    # the panel edge, so its bearing from the ego stays truthful.
    c = np.array([(x0 + x1) / 2.0, (y0 + y1) / 2.0])
    inset = 0.94
    lo = c + (np.array([x0, y0]) - c) * inset
    hi = c + (np.array([x1, y1]) - c) * inset
    bound = np.where(tgt > 0, hi, lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(np.abs(tgt) > 1e-9, bound / tgt, np.inf)
    p = tgt * float(np.clip(np.min(ratios), 0.0, 1.0))
    ax.plot(*p, marker="*", ms=12, mfc="none", color="tab:blue", ls="", label="target (clipped)")
    # Grow the label towards the box centre so it stays inside the panel.
    right, top = p[0] > c[0], p[1] > c[1]
    ax.annotate(f"target off-view\nx={tgt[0]:.0f}, fwd={tgt[1]:.0f} m", p, fontsize=7, color="tab:blue",
                xytext=(-8 if right else 8, -8 if top else 8), textcoords="offset points",
                ha="right" if right else "left", va="top" if top else "bottom")


def _plot_bev(ax: Axes, sample: dict) -> None:
    def to_plot(a: Any) -> np.ndarray:  # (right, forward) metres (show.bev_rows): forward up
        return np.asarray(a, dtype=np.float64).reshape(-1, 2)

    gt = to_plot(sample["waypoints"])
    pred = to_plot(sample["pred"]) if sample.get("pred") is not None else None
    tgt = to_plot(sample["target_point"])[0]
    pts = [gt, np.zeros((1, 2))] + ([pred] if pred is not None else [])
    x0, x1, y0, y1, half = _bev_limits(np.concatenate(pts))
    if np.isfinite(tgt).all() and np.abs(tgt).max() <= _TARGET_MAX_ZOOM_OUT * 2 * half:
        x0, x1, y0, y1, _ = _bev_limits(np.concatenate(pts + [tgt[None]]))

    ax.plot(0, 0, marker="^", ms=10, color="black", ls="", label="ego")
    ax.plot(gt[:, 0], gt[:, 1], "-o", color="tab:green", ms=4, lw=1.5, label="ground truth")
    title = "bird's-eye (m)"
    if pred is not None:
        ax.plot(pred[:, 0], pred[:, 1], "-x", color="tab:red", ms=5, lw=1.5, label="predicted")
        if pred.shape == gt.shape:
            err = np.linalg.norm(pred - gt, axis=1)
            title = f"ADE {err.mean():.2f}  FDE {err[-1]:.2f} m"
    _plot_target(ax, tgt, (x0, x1, y0, y1))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal", adjustable="box")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("right [m]", fontsize=8)
    ax.set_ylabel("forward [m]", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    # Outside the axes so it never hides the trajectories.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def _row_title(sample: dict) -> str:
    title = str(sample.get("key", "?"))
    cmd = sample.get("command")
    if cmd is not None:
        cmd = int(cmd)
        name = COMMAND_NAMES[cmd] if 0 <= cmd < len(COMMAND_NAMES) else "?"
        title += f"   [command {cmd}: {name}]"
    return title


def _check_samples(samples: list[dict], camera_names: list[str]) -> tuple[int, int]:
    if not samples:
        raise ValueError("montage needs at least one sample")
    shapes = {np.asarray(s["images"]).shape for s in samples}
    if len(shapes) != 1:
        raise ValueError(f"all samples must have the same image shape, got {sorted(shapes)}")
    shape = shapes.pop()
    if len(shape) != 4 or shape[1] != 3 or 0 in shape:
        raise ValueError(f"images must be (n_cameras, 3, H, W), got {shape}")
    n_cams, _, h, w = shape
    if len(camera_names) != n_cams:
        raise ValueError(f"{len(camera_names)} camera names for {n_cams} cameras: {camera_names}")
    return h, w


def montage(samples: list[dict], camera_names: list[str], out: str | Path,
            title: str | None = None) -> Path:
    """One row per sample: each camera image, then a bird's-eye plot of ground-truth waypoints, predicted
    waypoints (if the dict has 'pred'), and the target point. Writes a PNG and returns its path."""
    h, w = _check_samples(samples, camera_names)
    n_cams = len(camera_names)
    cam_w = ROW_HEIGHT_IN * min(w / h, _MAX_CAM_ASPECT)
    bev_w = ROW_HEIGHT_IN + _LEGEND_IN
    width = n_cams * cam_w + bev_w
    height = len(samples) * (ROW_HEIGHT_IN + 0.35) + (0.5 if title else 0.0)
    fig = _new_figure((width, height))
    fig.set_layout_engine("constrained")
    if title:
        fig.suptitle(title, fontsize=12)
    rows = fig.subfigures(len(samples), 1, squeeze=False)[:, 0]
    for sub, sample in zip(rows, samples):
        sub.suptitle(_row_title(sample), fontsize=10, ha="left", x=0.01)
        axes = sub.subplots(1, n_cams + 1, width_ratios=[cam_w] * n_cams + [bev_w])
        for ax, img, name in zip(axes[:-1], np.asarray(sample["images"]), camera_names):
            ax.imshow(_to_hwc_uint8(img))
            ax.set_title(name, fontsize=8)
            ax.set_axis_off()
        _plot_bev(axes[-1], sample)
    return _save_atomic(fig, out)
