"""The bench2drive encoder: a ClipTask (plan.py) whose files travel as bytes -> a sample.

Moved out of plan.py unchanged (issue 27 needed the room there)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....codecs import CODECS, codec_named
from ....extras import MEASUREMENTS, Extra, make_record
from ....modalities import points_problem
from ....schema import encode_sample
from ...frames import Encoded, FrameEncoder
from ...routes import Skip
from .raw import radar_array


@dataclass(frozen=True)
class ClipEncoder(FrameEncoder):
    """FrameEncoder for ClipTasks: every file's bytes travel in the task (no clip is opened
    in a worker); each is checked by its codec, the radar h5 becomes a typed array, the LAZ
    float32 points (y negated for --handedness right, as prepare_B2D.py's left2right)."""
    mirror_y: bool = False

    def encode(self, task: Any) -> Encoded | Skip:   # type: ignore[override]
        got = self.cameras(task, lambda cam: task.files[f"{cam}.jpg"])
        if isinstance(got, Skip):
            return got
        images, (files, source, stored) = got
        sample = encode_sample(self.spec, task.key, images, task.labels)
        for e in self.spec.extras:
            try:
                if e.name == MEASUREMENTS:
                    sample[e.member] = CODECS["record"].encode(make_record(e.fields, task.record))
                    continue
                name, data = task.files[e.member]
                sample[e.member] = self._member(e, data, self.mirror_y)
            except ValueError as exc:   # SchemaError too
                where = task.files.get(e.member, (f"anno/{task.frame:05d}.json.gz",))[0]
                return Skip(task.episode, task.frame, where or f"anno/{task.frame:05d}.json.gz",
                            str(exc))
        return Encoded(sample, task.episode, task.frame, files, source, stored)

    @staticmethod
    def _member(e: Extra, data: bytes, mirror_y: bool = False) -> bytes:
        if e.name == "radar":
            return codec_named("npy").encode(radar_array(data))
        if e.name == "lidar":   # LAZ in, float32 xyz out
            laz = codec_named("laz")
            problem = laz.check(data) or points_problem(points := laz.decode(data), 3)
            if problem:
                raise ValueError(problem)
            if mirror_y:
                points = points * np.array([1, -1, 1], np.float32)
            return codec_named("points").encode(points)
        problem = codec_named(e.codec).check(data)
        if problem:
            raise ValueError(problem)
        return data


__all__ = ["ClipEncoder"]
