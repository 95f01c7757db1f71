"""Run under torchrun: a small model with TransFuser 2022's batch contract trained for a few DDP
steps on CARLAWebData(adapter="transfuser2022"), then an eval pass; each rank reports what it saw.

    torchrun --standalone --nproc_per_node 2 tests/scripts/tf2022_contract_train.py SHARDS OUT

The step reads the batch as transfuser@22b3ccd team_code_transfuser/train.py
load_data_compute_loss does (written here from it, not copied): rgb, depth, lidar, label,
ego_waypoint, target_point, target_point_image and speed `.to(dtype=torch.float32)`, semantic
and bev `.to(dtype=torch.long)`; the losses are the kinds its model computes (L1 waypoints, CE
semantic and BEV, L1 depth, a box regression on the label rows that hold a box).
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from contract_common import ddp_train_eval


class TinyTF2022(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Conv2d(3, 8, 16, stride=16)            # (B, 8, 10, 44)
        self.bev = nn.Conv2d(2 + 1, 8, 8, stride=8)          # lidar + target_point_image
        self.sem, self.depth, self.bev_sem = nn.Conv2d(8, 7, 1), nn.Conv2d(8, 1, 1), \
            nn.Conv2d(8, 3, 1)
        self.plan = nn.Linear(16 + 2 + 1, 4 * 2 + 20 * 7)

    def forward(self, rgb, lidar, tp_image, target_point, ego_vel):
        f_img = self.img(rgb / 255.0)
        f_bev = self.bev(torch.cat([lidar, tp_image], 1))
        pooled = torch.cat([f_img.mean((2, 3)), f_bev.mean((2, 3))], 1)
        wp, boxes = self.plan(torch.cat([pooled, target_point, ego_vel], 1)).split([8, 140], 1)
        sem = F.interpolate(self.sem(f_img), size=rgb.shape[2:])
        depth = F.interpolate(self.depth(f_img), size=rgb.shape[2:])[:, 0]
        bev = F.interpolate(self.bev_sem(f_bev), size=(160, 160))
        return wp.view(-1, 4, 2), boxes.view(-1, 20, 7), sem, depth, bev


def contract(d):
    """Their keys, shapes and dtypes (their train.py converts each, so dtypes are checked)."""
    b = d["rgb"].shape[0]
    return (d["rgb"].shape == (b, 3, 160, 704) and d["rgb"].dtype == torch.uint8
            and d["bev"].shape == (b, 160, 160) and d["bev"].dtype == torch.int64
            and d["depth"].shape == (b, 160, 704) and d["depth"].dtype == torch.float64
            and d["semantic"].shape == (b, 160, 704) and d["lidar"].shape == (b, 2, 256, 256)
            and d["label"].shape == (b, 20, 7) and d["ego_waypoint"].dtype == torch.float64
            and d["target_point_image"].shape == (b, 1, 256, 256)
            and d["x_command"].dtype == torch.float64 and d["brake"].dtype == torch.bool)


def loss_of(model, d):
    f32 = {k: d[k].to(dtype=torch.float32) for k in (
        "rgb", "depth", "lidar", "label", "ego_waypoint", "target_point",
        "target_point_image", "speed")}
    wp, boxes, sem, depth, bev = model(f32["rgb"], f32["lidar"], f32["target_point_image"],
                                       f32["target_point"], f32["speed"].view(-1, 1))
    has_box = f32["label"].abs().sum(-1, keepdim=True).gt(0).float()
    return (F.l1_loss(wp, f32["ego_waypoint"])
            + F.cross_entropy(sem, d["semantic"].to(dtype=torch.long))
            + F.cross_entropy(bev, d["bev"].to(dtype=torch.long))
            + F.l1_loss(depth, f32["depth"])
            + ((boxes - f32["label"]).abs() * has_box).mean())


ddp_train_eval(sys.argv[1], Path(sys.argv[2]), "transfuser2022", TinyTF2022, contract,
               loss_of, val_batch_size=2)
