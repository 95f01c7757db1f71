"""A LeadTask -> one sample, in a pack worker: the strips cut into cameras, every sensor file
read and checked (sensors.py), the boxes pickle read through the opcode walker, the
metas and boxes stored as JSON. A bad file is a Skip naming it; a pickle without
--allow-pickle-input stops the pack (PickleRefused)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import cv2

from ....codecs import CODECS, codec_named
from ....extras import MEASUREMENTS, make_record
from ....schema import encode_sample
from ...frames import Encoded, FrameEncoder
from ...routes import Skip
from ...sources import read_bytes
from . import sensors
from .archive import held_route_files
from .pickles import plain, read_lead_pickle
from .plan import SENSORS
from .routes import LeadRoute


@dataclass(frozen=True)
class LeadEncoder(FrameEncoder):
    twin: bool = True
    optional: tuple[str, ...] = ()
    sensor_twins: tuple[str, ...] = ()   # folders whose <folder>_perturbated twin is packed

    @property
    def decodes(self) -> bool:
        """Always: every strip is decoded to be cut into cameras (work for --workers)."""
        return True

    def encode(self, task: Any) -> Encoded | Skip:   # type: ignore[override]
        route = LeadRoute(task.episode, Path(task.archive or task.route))
        with held_route_files(route):
            return self._encode(task)

    def _encode(self, task: Any) -> Encoded | Skip:
        route, t = Path(task.route), task.frame
        cams = self.spec.cameras
        sample: dict[str, Any] = {}
        file = f"rgb/{t:04d}.jpg"
        try:
            images, source, stored = self._strip(read_bytes(route / file), "rgb", "")
            sample.update(encode_sample(self.spec, task.key, images, task.labels))
            for file, read in self._members(route, t, len(cams)):
                sample.update(read(read_bytes(route / file)))
            sample["metas.json"] = codec_named("json").encode(task.metas)
            sample[f"{MEASUREMENTS}.npy"] = CODECS["record"].encode(
                make_record(self.spec.extra(MEASUREMENTS).fields, task.record))
        except FileNotFoundError:
            return Skip(task.episode, t, file, "missing; expected every sensor file of a "
                        "frame LEAD's loader serves")
        except (ValueError, OSError) as exc:   # SchemaError and LimitError too
            return Skip(task.episode, t, file, str(exc))
        return Encoded(sample, task.episode, t, {c: f"rgb/{t:04d}.jpg" for c in cams},
                       source, stored)

    def _strip(self, data: bytes, what: str, suffix: str) -> tuple[dict, dict, dict]:
        """One rgb strip -> per camera the stored image bytes, source and stored (H, W)."""
        parts = sensors.strip_rgb(data, self.source_ext, len(self.spec.cameras), what)
        images, source, stored = {}, {}, {}
        for cam, img in zip(self.spec.cameras, parts):
            source[cam] = img.shape[:2]
            if self.resize is not None:
                h, w = self.resize
                img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
            member = f"{cam}{suffix}.{self.spec.image_format}"
            images[cam] = self.spec.codec(member).with_options(quality=self.quality).encode(img)
            stored[cam] = img.shape[:2]
        return images, source, stored

    def _members(self, route: Path, t: int, n: int
                 ) -> list[tuple[str, Callable[[bytes], dict[str, bytes]]]]:
        """(file, bytes -> members) of every sensor file of frame t: each folder's, then its
        `<folder>_perturbated` twin's under the members' `_augmented` names."""
        name, sensor = f"{t:04d}", self._sensors(n)
        folders = [f for f in sensor if f in SENSORS or f in self.optional]
        out = [(f"{f}/{name}.{sensor[f][0]}", sensor[f][1]) for f in folders]
        out.append((f"bboxes/{name}.pkl", lambda d: {"bboxes.json": codec_named("json").encode(
            self._boxes(d, route, name))}))
        if self.twin:
            out.append((f"rgb_perturbated/{name}.jpg", self._twin))
        for f in self.sensor_twins:
            ext, read = sensor[f]
            out.append((f"{f}_perturbated/{name}.{ext}",
                        lambda d, read=read: {_augmented(m): v for m, v in read(d).items()}))
        return out

    def _sensors(self, n: int) -> dict[str, tuple[str, Callable[[bytes], dict[str, bytes]]]]:
        """folder -> (file extension, bytes -> members)."""
        cams = self.spec.cameras

        def per_camera(prefix: str, parts: list[bytes]) -> dict[str, bytes]:
            return {f"{prefix}_{c}.png": p for c, p in zip(cams, parts)}

        def hdmap(data: bytes) -> dict[str, bytes]:
            problem = codec_named("bev_classes").check(data)
            if problem:
                raise ValueError(problem)
            return {"hdmap.png": data}

        return {
            "semantics": ("png", lambda d: per_camera("semantic",
                                                      sensors.gray_pngs(d, n, "semantics"))),
            "depth": ("png", lambda d: per_camera("depth", sensors.gray_pngs(d, n, "depth"))),
            "instance": ("png", lambda d: per_camera("instance", sensors.instance_pngs(d, n))),
            "hdmap": ("png", hdmap),
            "lidar": ("laz", lambda d: {"lidar.npy": codec_named("points").encode(
                sensors.lidar_points(d))}),
            "radar": ("npz", lambda d: {"radar.npy": sensors.npy(sensors.radar_rows(d))}),
            "camera_pc": ("npz", lambda d: {"camera_pc.npy": sensors.npy(sensors.camera_pc(d))})}

    def _twin(self, data: bytes) -> dict[str, bytes]:
        images, _, _ = self._strip(data, "rgb_perturbated", "_augmented")
        return {f"{c}_augmented.{self.spec.image_format}": b for c, b in images.items()}

    def _boxes(self, data: bytes, route: Path, name: str) -> Any:
        boxes = read_lead_pickle(data, f"{route.name}/bboxes/{name}.pkl", self.allow_pickle)
        if not isinstance(boxes, list):
            raise ValueError(f"holds a {type(boxes).__name__}; expected LEAD's list of box "
                             "dicts")
        return plain(boxes)


def _augmented(member: str) -> str:
    """A member's twin name: semantic_front.png -> semantic_front_augmented.png."""
    stem, _, ext = member.partition(".")
    return f"{stem}_augmented.{ext}"


__all__ = ["LeadEncoder"]
