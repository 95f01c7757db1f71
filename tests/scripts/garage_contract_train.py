"""Run under torchrun: a small model with TransFuser++'s batch contract trained for a few DDP
steps on CARLAWebData(adapter="garage"), then an eval pass; each rank reports what it saw.

    torchrun --standalone --nproc_per_node 2 tests/scripts/garage_contract_train.py SHARDS OUT

The step reads the batch as carla_garage@1448bed team_code/train.py load_data_compute_loss
does (written here from it, not copied): each key `.to(dtype=...)` (float32 for the images,
LiDAR, targets and labels, long for yaw_class, brake_target, target_speed, semantic and
bev_semantic), the route's first 20 points, speed unsqueezed; the losses are the kinds its
model computes (L1 waypoints and route, CE target speed, CE semantic and BEV semantic, L1
depth, CenterNet: focal-style heatmap loss over avg_factor, wh/offset/velocity L1 and yaw /
brake CE at pixel_weight cells).
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from contract_common import ddp_train_eval


class TinyTFPP(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Conv2d(3, 8, 16, stride=16)           # (B, 8, 16, 64)
        self.bev = nn.Conv2d(1, 8, 4, stride=4)             # (B, 8, 64, 64)
        self.sem, self.depth = nn.Conv2d(8, 7, 1), nn.Conv2d(8, 1, 1)
        self.bev_sem = nn.Conv2d(8, 11, 1)
        self.box = nn.Conv2d(8, 4 + 2 + 12 + 1 + 2 + 1 + 2, 1)
        self.plan = nn.Linear(16 + 2 + 1 + 6, 8 * 2 + 4 + 20 * 2)

    def forward(self, rgb, lidar, target_point, ego_vel, command):
        f_img, f_bev = self.img(rgb / 255.0), self.bev(lidar)
        pooled = torch.cat([f_img.mean((2, 3)), f_bev.mean((2, 3))], 1)
        plan = self.plan(torch.cat([pooled, target_point, ego_vel, command], 1))
        wp, speed, route = plan.split([16, 4, 40], 1)
        sem = F.interpolate(self.sem(f_img), size=rgb.shape[2:])
        depth = F.interpolate(self.depth(f_img), size=rgb.shape[2:])[:, 0]
        bev_sem = F.interpolate(self.bev_sem(f_bev), size=(256, 256))
        return wp.view(-1, 8, 2), speed, route.view(-1, 20, 2), sem, bev_sem, depth, \
            self.box(f_bev).split([4, 2, 12, 1, 2, 1, 2], 1)


def contract(d):
    """Their keys, shapes and dtypes (their train.py converts each, so dtypes are checked)."""
    b = d["rgb"].shape[0]
    return (d["rgb"].shape == (b, 3, 256, 1024) and d["rgb"].dtype == torch.uint8
            and d["lidar"].shape == (b, 1, 256, 256) and d["center_heatmap"].shape ==
            (b, 4, 64, 64) and d["yaw_class"].shape == (b, 64, 64) and d["semantic"].shape ==
            (b, 256, 1024) and d["bev_semantic"].shape == (b, 256, 256)
            and d["ego_waypoints"].dtype == torch.float64 and d["avg_factor"].dtype ==
            torch.int64 and d["bounding_boxes"].shape == (b, 30, 8))


def loss_of(model, d):
    f32 = {k: d[k].to(dtype=torch.float32) for k in (
        "rgb", "lidar", "target_point", "command", "ego_waypoints", "depth", "center_heatmap",
        "wh", "yaw_res", "offset", "velocity", "pixel_weight", "avg_factor", "bounding_boxes")}
    ego_vel = d["speed"].to(dtype=torch.float32).unsqueeze(1)
    route = d["route"][:, :20].to(dtype=torch.float32)
    wp, speed, pred_route, sem, bev_sem, depth, (heat, wh, yaw, yaw_res, off, vel, brake) = \
        model(f32["rgb"], f32["lidar"], f32["target_point"], ego_vel, f32["command"])
    w = f32["pixel_weight"][:, :1]
    avg = f32["avg_factor"].view(-1, 1, 1, 1)
    heat = heat.sigmoid().clamp(1e-4, 1 - 1e-4)
    pos = f32["center_heatmap"].eq(1).float()
    focal = -(pos * (1 - heat) ** 2 * heat.log() + (1 - pos) * (1 - f32["center_heatmap"]) ** 4
              * heat ** 2 * (1 - heat).log())
    yaw_ce = F.cross_entropy(yaw, d["yaw_class"].to(dtype=torch.long), reduction="none")
    brake_ce = F.cross_entropy(brake, d["brake_target"].to(dtype=torch.long), reduction="none")
    return (F.l1_loss(wp, f32["ego_waypoints"]) + F.l1_loss(pred_route, route)
            + F.cross_entropy(speed, d["target_speed"].to(dtype=torch.long))
            + F.cross_entropy(sem, d["semantic"].to(dtype=torch.long))
            + F.cross_entropy(bev_sem, d["bev_semantic"].to(dtype=torch.long))
            + F.l1_loss(depth, f32["depth"]) + (focal / avg).sum() / len(avg)
            + ((wh - f32["wh"]).abs() * w / avg).sum() + ((off - f32["offset"]).abs() * w / avg).sum()
            + ((vel - f32["velocity"]).abs() * w / avg).sum()
            + ((yaw_res - f32["yaw_res"]).abs() * w / avg).sum()
            + (yaw_ce * w[:, 0] / avg[:, 0]).sum() + (brake_ce * w[:, 0] / avg[:, 0]).sum())


ddp_train_eval(sys.argv[1], Path(sys.argv[2]), "garage", TinyTFPP, contract, loss_of,
               val_batch_size=3)
