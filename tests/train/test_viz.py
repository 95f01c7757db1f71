from __future__ import annotations

import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.train.config import load_config, to_dict
from carla_wds.train.viz import (CURVES_FIGSIZE, DPI, curves_figure, ema, montage, plot_run,
                                 read_metrics)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CAMERAS = ["front", "left", "right", "rear"]


def write_metrics(path: Path, extra_lines: list[str] = ()) -> None:
    lines = []
    for step in range(0, 200, 10):
        lines.append(json.dumps({"kind": "train", "step": step, "epoch": step // 100,
                                 "loss": 2.0 * 0.98 ** step + 0.05, "lr": 1e-3}))
        if step % 50 == 0:
            lines.append(json.dumps({"kind": "eval", "step": step, "epoch": step // 100,
                                     "ade": 1.5 * 0.99 ** step, "fde": 3.0 * 0.99 ** step,
                                     "baseline_ade": 1.2, "baseline_fde": 2.5, "n": 64}))
    path.write_text("\n".join(lines + list(extra_lines)) + "\n")


def decode_png(path: Path) -> np.ndarray:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None
    return img


def no_temp_files(d: Path) -> bool:
    return not [p for p in d.iterdir() if p.name.endswith(".tmp")]


def test_plot_run_default_output(tmp_path: Path) -> None:
    write_metrics(tmp_path / "metrics.jsonl")
    out = plot_run(tmp_path)
    assert out == tmp_path / "curves.png"
    img = decode_png(out)
    assert img.shape == (round(CURVES_FIGSIZE[1] * DPI), round(CURVES_FIGSIZE[0] * DPI), 3)
    assert img.std() > 5  # not a blank canvas
    assert no_temp_files(tmp_path)


def test_plot_run_custom_output_creates_parent(tmp_path: Path) -> None:
    write_metrics(tmp_path / "metrics.jsonl")
    out = plot_run(tmp_path, tmp_path / "plots" / "deep" / "c.png")
    assert out.is_file()
    decode_png(out)


def test_plot_run_train_only(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"kind": "train", "step": 1, "epoch": 0, "loss": 0.0, "lr": 1e-3}) + "\n")
    decode_png(plot_run(tmp_path))


def test_malformed_lines_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = ['{"kind": "train", "step": 5', "not json", "[1, 2]",
           json.dumps({"kind": "train", "step": 7}),
           json.dumps({"kind": "eval", "step": 9, "ade": "x", "fde": 1, "baseline_ade": 1, "baseline_fde": 1}),
           json.dumps({"kind": "mystery", "step": 3})]
    write_metrics(tmp_path / "metrics.jsonl", bad)
    with caplog.at_level(logging.WARNING, logger="carla_wds.train.viz"):
        train, evals = read_metrics(tmp_path / "metrics.jsonl")
        decode_png(plot_run(tmp_path))
    assert len(train) == 20 and len(evals) == 4
    assert any("skipped 6 malformed" in r.getMessage() for r in caplog.records)


def test_duplicate_steps_last_wins(tmp_path: Path) -> None:
    rec = {"kind": "train", "step": 3, "epoch": 0, "lr": 1.0}
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({**rec, "loss": 9.0}) + "\n" + json.dumps({**rec, "loss": 1.0}) + "\n")
    train, _ = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["loss"] for r in train] == [1.0]


def test_missing_metrics_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot_run(tmp_path / "nonexistent")


def test_empty_metrics_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match=str(path).replace("\\", "\\\\")):
        plot_run(tmp_path)


def make_samples(n: int, with_pred: bool, n_cams: int = 4, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        t = np.arange(1, 5, dtype=np.float32)[:, None]
        wps = t * np.array([0.3 * (i - 1), -2.0], np.float32)  # forward is -y
        s = {
            "images": rng.integers(0, 256, (n_cams, 3, 48, 96), dtype=np.uint8),
            "waypoints": wps,
            "target_point": np.array([3.0 * (i - 1), -15.0 if i != 2 else -120.0], np.float32),
            "key": f"town01/route_{i:03d}/{i * 10:04d}",
            "command": i,
        }
        if with_pred:
            s["pred"] = wps + rng.normal(0, 0.3, wps.shape).astype(np.float32)
        samples.append(s)
    return samples


@pytest.mark.parametrize("with_pred", [True, False])
def test_montage_height_grows_with_rows(tmp_path: Path, with_pred: bool) -> None:
    one = decode_png(montage(make_samples(1, with_pred), CAMERAS, tmp_path / "one.png"))
    three = decode_png(montage(make_samples(3, with_pred), CAMERAS, tmp_path / "sub" / "three.png",
                               title="epoch 3"))
    assert three.shape[0] > 2 * one.shape[0]
    assert three.shape[1] >= one.shape[1]
    assert no_temp_files(tmp_path) and no_temp_files(tmp_path / "sub")


def test_montage_width_grows_with_cameras(tmp_path: Path) -> None:
    two = decode_png(montage(make_samples(2, True, n_cams=2), CAMERAS[:2], tmp_path / "a.png"))
    four = decode_png(montage(make_samples(2, True, n_cams=4), CAMERAS, tmp_path / "b.png"))
    assert four.shape[1] > two.shape[1]


def test_montage_rejects_camera_name_mismatch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="camera names"):
        montage(make_samples(1, False), CAMERAS[:3], tmp_path / "x.png")
    with pytest.raises(ValueError, match="at least one"):
        montage([], CAMERAS, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_curves_name_the_run_smooth_the_loss_and_count_epochs(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo" / "run"
    run_dir.mkdir(parents=True)
    cfg = load_config("tiny", [f"run_dir={run_dir}", "data.train=/packs/b2d_train", "epochs=2"])
    (run_dir / "config.json").write_text(json.dumps(to_dict(cfg)))
    rng = np.random.default_rng(0)
    lines = [json.dumps({"kind": "train", "step": s, "epoch": s // 100, "lr": 1e-3,
                         "loss": float(np.exp(-s / 100) * (1 + 0.5 * rng.random()))})
             for s in range(0, 200, 10)]
    lines += [json.dumps({"kind": "eval", "step": s, "epoch": s // 100, "ade": 1.0, "fde": 2.0,
                          "baseline_ade": 1.1, "baseline_fde": 2.2, "n": 8}) for s in (99, 199)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    fig = curves_figure(run_dir)
    assert fig._suptitle.get_text() == (   # not "run": the run's name and what it trained
        f"demo/run: {cfg.model.backbone} ({cfg.model.prior} prior) on b2d_train, 2 epochs of "
        f"batch {cfg.data.batch_size}, lr {cfg.optim.lr:g}")
    ax_loss, ax_eval = fig.axes[:2]
    raw, smooth = ax_loss.get_lines()[:2]
    assert raw.get_alpha() < 0.5 and smooth.get_linewidth() > raw.get_linewidth()
    assert list(smooth.get_ydata()) == pytest.approx(ema(list(raw.get_ydata())))
    wiggle = [float(np.abs(np.diff(np.log(line.get_ydata()))).sum()) for line in (raw, smooth)]
    assert wiggle[1] < 0.7 * wiggle[0], wiggle
    for ax in (ax_loss, ax_eval):   # an epoch scale on top, a tick at each epoch's end
        (top,) = ax.child_axes
        assert top.get_xlabel() == "epoch"
        assert list(top.get_xticks()) == [0, 99, 199]
        assert [t.get_text() for t in top.get_xticklabels()] == ["0", "1", "2"]


def test_curves_without_a_config_are_named_after_the_folder(tmp_path: Path) -> None:
    write_metrics(tmp_path / "metrics.jsonl")
    assert curves_figure(tmp_path)._suptitle.get_text() == "/".join(tmp_path.resolve().parts[-2:])


def test_ema_is_bias_corrected() -> None:
    assert ema([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    assert ema([0.0, 10.0], weight=0.5) == pytest.approx([0.0, 10.0 * 0.5 / 0.75])
