"""One frame's camera files -> an encoded sample, in a pack worker; and the per-camera size rule.

Every image goes through the registry (carla_wds.codecs): the source file's codec checks its
structure (a truncated file is a bad frame, found without decoding) and reads its size from
the header; the stored member's codec re-encodes it when --image-format or --resize ask, and
schema.encode_sample puts every member through its codec.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from ..codecs import CODECS, ImageCodec, ImageHeaderError, codec_for, codec_named
from ..extras import MEASUREMENTS, make_record
from ..modalities import points_problem
from ..schema import MAX_PIXELS, SampleSpec, SchemaError, encode_sample
from .layout_spec import Reader
from .routes import FrameTask, Skip
from .sources import decode_json, read_bytes, read_npy




@dataclass
class Encoded:
    """A worker's sample, with its images' sizes from their headers for the main process to
    compare across the whole stream (workers see only their own chunk)."""
    sample: dict[str, Any]
    episode: str
    frame: int
    files: dict[str, str]                      # camera -> "rgb/0005.png"
    source_sizes: dict[str, tuple[int, int]]   # (H, W) of the raw image
    stored_sizes: dict[str, tuple[int, int]]   # (H, W) of the image in the shard


@dataclass(frozen=True)
class FrameEncoder:
    """What a worker needs to turn a FrameTask into an encoded sample (pickled to workers)."""
    spec: SampleSpec
    source_ext: str
    quality: int
    resize: tuple[int, int] | None
    check_images: bool
    readers: tuple[Reader, ...] = ()
    allow_pickle: bool = False

    @property
    def passthrough(self) -> bool:
        """Source bytes are stored verbatim: no resize and the stored format is the source's."""
        return self.resize is None and self.spec.image_format == self.source_ext

    @property
    def decodes(self) -> bool:
        """Whether every image is decoded (CPU work worth worker processes)."""
        return self.check_images or not self.passthrough

    def encode(self, task: FrameTask) -> Encoded | Skip:
        def read(cam: str) -> tuple[str, bytes]:
            path = task.image_paths[cam]
            with open(path, "rb") as f:
                return "/".join(Path(path).parts[-2:]), f.read()
        got = self.cameras(task, read)
        if isinstance(got, Skip):
            return got
        sample, (files, source, stored) = got
        sample = encode_sample(self.spec, task.key, sample, task.labels)
        for reader in self.readers:
            path = task.sensor_paths[reader.name]
            got = self._extra(reader, path)
            if isinstance(got, str):
                return Skip(task.episode, task.frame, "/".join(Path(path).parts[-2:]), got)
            sample.update(got)
        if task.record is not None:
            extra = self.spec.extra(MEASUREMENTS)
            sample[extra.member] = CODECS["record"].encode(make_record(extra.fields, task.record))
        return Encoded(sample, task.episode, task.frame, files, source, stored)

    def cameras(self, task, read) -> tuple[dict, tuple[dict, dict, dict]] | Skip:
        """Each camera's (file, bytes) from `read(camera)`, checked and (re-)encoded: the
        images, and per camera its file, source size and stored size; or the first Skip."""
        images, files, source, stored = {}, {}, {}, {}
        for cam, member in zip(self.spec.cameras, self.spec.image_members):
            files[cam], data = read(cam)
            got = self._camera(data, member)
            if isinstance(got, str):
                return Skip(task.episode, task.frame, files[cam], got)
            images[cam], source[cam], stored[cam] = got
        return images, (files, source, stored)

    def _extra(self, r: Reader, path: str) -> dict[str, bytes] | str:
        """One raw file -> its member(s), or the problem that makes the frame bad. A pickle
        without --allow-pickle-input raises (sources.PickleRefused): never a skip."""
        try:
            if r.read == "pickled_tuple":
                got = read_npy(Path(path), self.allow_pickle, "a (frame, points) tuple")
                points = got[1] if getattr(got, "dtype", None) == object and len(got) == 2 \
                    else got
                problem = points_problem(points, self._columns(r))
                return problem or {r.member: codec_named(r.codec).encode(points)}
            data = read_bytes(Path(path))
            if r.read == "laz_points":   # decoded once here, so no loader decodes LAZ
                laz = codec_named("laz")
                problem = laz.check(data)
                if problem:
                    return problem
                points = laz.decode(data)
                problem = points_problem(points, self._columns(r))
                return problem or {r.member: codec_named(r.codec).encode(points)}
            if r.read.startswith("boxes_"):
                return self._boxes(r, decode_json(data, r.gz))
            if r.read == "camera":
                got = self._camera(data, r.member)
                return got if isinstance(got, str) else {r.member: got[0]}
            codec = codec_named(r.codec)
            # point clouds are decoded once here: a corrupt LAZ chunk or a NaN point is
            # invisible to the header check, and the loader would meet it mid-epoch
            full = getattr(codec, "check_full", None)
            problem = full(data, self._columns(r)) if full else codec.check(data)
            return problem if problem else {r.member: data}
        except SchemaError as exc:   # its reason only: the Skip adds the pack's own fix
            return exc.reason
        except (ValueError, OSError) as exc:
            return str(exc)

    def _columns(self, r: Reader) -> int | None:
        """The column count the spec declares for a point-cloud member (None: any)."""
        shape = self.spec.extra(r.name).shape
        return shape[1] if len(shape) == 2 else None

    @staticmethod
    def _boxes(r: Reader, entries: object) -> dict[str, bytes]:
        from ..boxes import garage_boxes, tf2022_boxes   # the raw JSON's own conventions
        typed = (tf2022_boxes if r.read == "boxes_tf2022" else garage_boxes)(entries)
        out = {r.member: codec_named("npy").encode(typed)}
        if r.raw_member:
            out[r.raw_member] = codec_named("json").encode(entries)
        return out

    def _camera(self, data: bytes, member: str
                ) -> tuple[bytes, tuple[int, int], tuple[int, int]] | str:
        """(bytes to store, source size, stored size), or the problem that makes it a bad frame."""
        src: ImageCodec = codec_for(f"image.{self.source_ext}")
        problem = src.check(data)
        if problem is None:
            try:
                size = src.size(data)
            except ImageHeaderError as exc:
                problem = f"{exc}; expected a {self.source_ext} image whose header gives its size"
        rgb = None
        if problem is None and self.decodes:
            try:
                rgb = src.decode(data)
            except SchemaError:
                problem = "image does not decode; expected a valid image file"
        if problem:
            return problem
        if self.passthrough:
            return data, size, size
        out = self._reencode(rgb, member)
        return out, size, self.spec.codec(member).size(out)

    def _reencode(self, rgb: np.ndarray, member: str) -> bytes:
        if self.resize is not None:
            h, w = self.resize
            rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        return self.spec.codec(member).with_options(quality=self.quality).encode(rgb)


def encode_chunk(args: tuple[list[FrameTask], FrameEncoder]) -> list[Encoded | Skip]:
    """A worker's task: one chunk of frames, encoded in order."""
    tasks, encoder = args
    return [encoder.encode(t) for t in tasks]


class ImageSizes:
    """Each camera's image size, taken from the stream's first sample: a frame whose image
    differs is a bad frame, and the sizes go into the manifest (the loader refuses members
    whose header disagrees) and the journal (a resume does not read the first images)."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.source = {c: tuple(v) for c, v in meta.get("source_sizes", {}).items()}
        self.stored = {c: tuple(v) for c, v in meta.get("image_sizes", {}).items()}
        self.first = dict(meta.get("first_files", {}))

    def meta(self) -> dict[str, Any]:
        return {"source_sizes": {c: list(v) for c, v in self.source.items()},
                "image_sizes": {c: list(v) for c, v in self.stored.items()},
                "first_files": self.first}

    def check(self, item: Encoded) -> dict[str, Any] | Skip:
        if not self.source:
            for cam, (h, w) in item.stored_sizes.items():
                if not (h and w and h * w <= MAX_PIXELS):   # the loader would refuse the pack
                    return Skip(item.episode, item.frame, item.files[cam],
                                f"image is {h}x{w} (HxW) as stored; expected 1..{MAX_PIXELS} "
                                "pixels, the most the loader accepts",
                                fix="pass --resize HxW, or pack other images")
            self.source, self.stored = dict(item.source_sizes), dict(item.stored_sizes)
            self.first = {c: f"{item.episode}/{f}" for c, f in item.files.items()}
            return item.sample
        for cam, (h, w) in item.source_sizes.items():
            if (h, w) != self.source[cam]:
                eh, ew = self.source[cam]
                return Skip(item.episode, item.frame, item.files[cam],
                            f"image is {h}x{w} (HxW) but {self.first[cam]}, the first {cam} "
                            f"image, is {eh}x{ew}; expected one size per camera")
        return item.sample
