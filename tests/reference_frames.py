"""tests/reference.py, part 3: which frames are samples, and conversions between the ego frames.

Sources, frames and the no-carla_wds rule: see tests/reference.py, which re-exports all of this.
"""
from __future__ import annotations

import numpy as np

from .reference_garage import GARAGE_CARLA_FPS
from .reference_tcp_tf import TCP_FUTURE_FRAMES, TCP_INPUT_FRAMES, TF2022_LIDAR_POS, TF2022_PRED_LEN

# --------------------------------------------------------------------------------------------
# which frames are samples
# --------------------------------------------------------------------------------------------

NATIVE_RATE_HZ = {"tcp": 2.0, "transfuser2021": 2.0, "transfuser2022": 2.0, "garage": 4.0}


def sample_frames(n_frames: int, project: str, rate_hz: float | None = None, *,
                  pred_len: int | None = None, seq_len: int = 1, train_sampling_rate: int = 1) -> list[int]:
    """The (current-)frame indices a project's loader serves from one route with frames 0..n-1.

    n_frames is what each loader counts: TCP len(measurements/), TF-2021 len(rgb_front/),
    TF-2022 and garage len(lidar/).
    - "tcp" (OpenDriveLab/TCP@main:tools/gen_data.py:gen_single_route): none if
      n < INPUT_FRAMES + FUTURE_FRAMES = 5, else i in range(INPUT_FRAMES - 1, n - FUTURE_FRAMES)
      = [0, n - 4).
    - "transfuser2021" (transfuser@cvpr2021:transfuser/data.py:__init__):
      num_seq = (n - pred_len - 2) // seq_len; frame seq*seq_len + 1 for seq in range(num_seq)
      (pred_len 4: [1, n - 5]).
    - "transfuser2022" (transfuser@2022:team_code_transfuser/data.py:__init__, "ignore the first
      two and last two frame"): seq in range(2, n - pred_len - seq_len - 2) = [2, n - 7).
    - "garage" (carla_garage@main:team_code/data.py:__init__, config.py): with
      data_save_freq = 20 / rate_hz (5 at the released 4 Hz): skip_first = int(2.5*20)//5 = 10,
      pred_len = int(2.0*20)//5 = 8; seq in range(skip_first, n - pred_len - seq_len) with
      seq % train_sampling_rate == 0 = [10, n - 9). Route-level filters are not modelled here:
      routes without results.json.gz or with scores.score_composed < 100 give nothing, and
      Repetition >= num_repetitions (3) folders are skipped (config.py).
    rate_hz: only garage's counts depend on it; for the others it must be None or 2.
    """
    if project not in NATIVE_RATE_HZ:
        raise ValueError(f"unknown project {project!r}; one of {sorted(NATIVE_RATE_HZ)}")
    if project != "garage" and rate_hz not in (None, 2, 2.0):
        raise ValueError(f"{project} is 2 Hz data; its sample rule has no rate")
    if project == "tcp":
        future = TCP_FUTURE_FRAMES if pred_len is None else pred_len
        if n_frames < TCP_INPUT_FRAMES + future:
            return []
        return list(range(TCP_INPUT_FRAMES - 1, n_frames - future))
    if project == "transfuser2021":
        pred = 4 if pred_len is None else pred_len
        num_seq = (n_frames - pred - 2) // seq_len
        return [seq * seq_len + 1 for seq in range(max(num_seq, 0))]
    if project == "transfuser2022":
        pred = TF2022_PRED_LEN if pred_len is None else pred_len
        return list(range(2, n_frames - pred - seq_len - 2))
    rate = NATIVE_RATE_HZ["garage"] if rate_hz is None else float(rate_hz)
    save_freq = GARAGE_CARLA_FPS / rate
    if abs(save_freq - round(save_freq)) > 1e-9:
        raise ValueError(f"garage saves every data_save_freq-th 20 Hz tick; {rate_hz} Hz is not 20/int")
    save_freq = int(round(save_freq))
    skip_first = int(2.5 * GARAGE_CARLA_FPS) // save_freq
    pred = int(2.0 * GARAGE_CARLA_FPS) // save_freq if pred_len is None else pred_len
    return [seq for seq in range(skip_first, n_frames - pred - seq_len) if seq % train_sampling_rate == 0]


# --------------------------------------------------------------------------------------------
# conversions between the ego frames (docs/coordinates.md)
# --------------------------------------------------------------------------------------------

FRAMES = ("tcp", "transfuser2022", "garage", "b2d")
_ALIASES = {"carla": "garage", "transfuser2021": "tcp", "transfuser2022_target_point": "tcp",
            "nuscenes": "b2d", "bench2drive": "b2d"}


def _frame(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name not in FRAMES:
        raise ValueError(f"unknown frame {name!r}; one of {FRAMES} or {sorted(_ALIASES)}")
    return name


def _to_garage(p: np.ndarray, src: str) -> np.ndarray:
    x, y = p[..., 0], p[..., 1]
    if src == "garage":
        f, r = x, y
    elif src == "tcp":               # tcp (x, y) = (right, -forward)
        f, r = -y, x
    elif src == "transfuser2022":    # (forward - 1.3, right)
        f, r = x + TF2022_LIDAR_POS[0], y
    else:                            # b2d (forward, left)
        f, r = x, -y
    return np.stack([f, r], axis=-1)


def _from_garage(p: np.ndarray, dst: str) -> np.ndarray:
    f, r = p[..., 0], p[..., 1]
    if dst == "garage":
        x, y = f, r
    elif dst == "tcp":
        x, y = r, -f
    elif dst == "transfuser2022":
        x, y = f - TF2022_LIDAR_POS[0], r
    else:
        x, y = f, -r
    return np.stack([x, y], axis=-1)


def convert(points, src: str, dst: str) -> np.ndarray:
    """2D points (..., 2) from one ego frame to another, both at the same instant and vehicle.

    garage (f, r): x forward, y right          -> the hub
    tcp      = (r, -f)                         (TCP, TF-2021, TF-2022 target_point)
    transfuser2022 = (f - 1.3, r)              (TF-2022 ego_waypoint; origin at the virtual LiDAR)
    b2d      = (f, -r)                         (right-handed, x forward, y left)
    Aliases: carla -> garage; transfuser2021, transfuser2022_target_point -> tcp; nuscenes,
    bench2drive -> b2d.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.shape[-1] != 2:
        raise ValueError(f"points must be (..., 2), got {p.shape}")
    return _from_garage(_to_garage(p, _frame(src)), _frame(dst))


# A left curve, 3 waypoints 3 m apart ahead of the car, in the garage frame (y = -x^2 / 30;
# left is y < 0 there). docs/coordinates.md and tools/plot_frames.py draw these;
# tests/test_reference.py pins the numbers in every frame.
EXAMPLE_GARAGE = np.array([[3.0, -0.3], [6.0, -1.2], [9.0, -2.7]], dtype=np.float64)


def example_points(frame: str) -> np.ndarray:
    """EXAMPLE_GARAGE expressed in `frame`."""
    return convert(EXAMPLE_GARAGE, "garage", frame)
