"""Independent float64 references of each CARLA dataset project's own label formulas.

Each function is a transcription of the named project's code (plain numpy, float64), fed the
decoded JSON dicts as they are on disk. Nothing here imports carla_wds: the packer's tests
compare its stored labels against these, so a mistake in the packer cannot hide in both.
The code lives in three sibling modules, re-exported here (import this module, not those):
reference_tcp_tf.py (shared helpers, TCP, TransFuser), reference_garage.py (carla_garage) and
reference_frames.py (which frames are samples; conversions between the ego frames).

Sources (snapshots read with `git show <commit>:<path>`; default branches unless named):
- OpenDriveLab/TCP@main 73cc1dd: tools/gen_data.py, TCP/data.py, leaderboard/team_code/
  roach_ap_agent.py (save: theta = compass), planner.py (GNSS mean/scale)
- autonomousvision/transfuser@2022 22b3ccd (default branch): team_code_transfuser/data.py,
  utils.py, config.py, model.py; team_code_autopilot/autopilot.py, data_agent.py
- autonomousvision/transfuser@cvpr2021 9a90951: transfuser/data.py, train.py
- autonomousvision/carla_garage@main 1448bed: team_code/data.py, transfuser_utils.py, config.py,
  autopilot.py, docs/coordinate_systems.md
- Thinklab-SJTU/Bench2DriveZoo@uniad/vad 10a2e5d: mmcv/datasets/prepare_B2D.py (left2right)

Ego frames (2D, metres; see docs/coordinates.md, and `convert` below):
- "tcp":            x = right, y = backward (forward is -y), origin at the vehicle (GNSS at 0,0,0).
                    TCP's waypoints and target_point, TF-2021's, and TF-2022's target_point.
- "transfuser2022": x = forward, y = right, origin 1.3 m ahead of the vehicle origin
                    (the "virtual LiDAR"). TF-2022's ego_waypoint.
- "garage":         x = forward, y = right (CARLA's left-handed vehicle frame), origin at the
                    vehicle. carla_garage's ego_waypoints, target_point, aim_wp, route.
- "b2d":            x = forward, y = left (right-handed, nuScenes/Bench2Drive ego), origin at the
                    vehicle (prepare_B2D.py: world2ego = left2right @ world2ego @ left2right,
                    left2right = diag(1, -1, 1, 1)). For reference only.
"""
from __future__ import annotations

from .reference_frames import (  # noqa: F401
    _ALIASES, EXAMPLE_GARAGE, FRAMES, NATIVE_RATE_HZ, _frame, _from_garage, _to_garage, convert,
    example_points, sample_frames)
from .reference_garage import (  # noqa: F401
    GARAGE_CARLA_FPS, GARAGE_DATA_SAVE_FREQ, GARAGE_DENSE_ROUTE_MIN_DISTANCE, GARAGE_NUM_ROUTE_POINTS,
    _circle_line_segment_intersection, _garage_aug_rotation, _garage_iterative_line_interpolation,
    garage_augment_route, garage_augment_target_point, garage_command_one_hot, garage_route,
    garage_waypoints)
from .reference_tcp_tf import (  # noqa: F401
    TCP_FUTURE_FRAMES, TCP_INPUT_FRAMES, TF2022_LIDAR_POS, TF2022_PRED_LEN, TF2022_SEQ_LEN,
    _tf2022_ego_entries, carla_matrix, rot2, tcp_brake_override, tcp_labels, transfuser2021_waypoints,
    transfuser2022_waypoints)
