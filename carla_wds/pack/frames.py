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

from .. import limits
from ..codecs import CODECS, ImageCodec, ImageHeaderError, codec_for, codec_named
from ..datasets import box_parser, box_parsers
from ..extras import MEASUREMENTS, make_record
from ..imagesize import image_size
from ..limits import LimitError
from ..modalities import points_problem
from ..schema import IMAGE_FORMATS, SampleSpec, SchemaError, encode_sample
from .routes import FIX_SKIP, FrameTask, Reader, Skip
from .sources import decode_json, read_bytes, read_file, read_npy

Problem = str | tuple[str, str]   # why a frame is bad, or (why, the fix to name)


def limit_problem(exc: LimitError) -> tuple[str, str]:
    """A LimitError as a Skip's (reason, fix): the limit to raise if the file is genuine."""
    reason = str(exc).split(". Fix: ")[0]
    return reason, (f"if the file is genuine, raise the limit: --limit {exc.name}=N (now "
                    f"{exc.limit:,}); otherwise {FIX_SKIP}")


def too_large(h: int, w: int) -> tuple[str, str]:
    """An image over image_pixels (or empty), which the loader would refuse: (why, fix)."""
    pixels = limits.active().image_pixels
    return (f"image is {h}x{w} (HxW) as stored; expected 1..{pixels} pixels (image_pixels), "
            "the most the loader accepts", "pass --resize HxW, or pack other images, or if "
            "the image is genuine raise --limit image_pixels=N")


def _is_problem(got: Any) -> bool:
    return isinstance(got, str) or isinstance(got[0], str)


def skip_of(task: FrameTask | Encoded, file: str, problem: Problem) -> Skip:
    reason, fix = (problem, FIX_SKIP) if isinstance(problem, str) else problem
    return Skip(task.episode, task.frame, file, reason, fix)


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
            path = task.image_paths[cam]   # a file, or a member (sources.files_from)
            return "/".join(Path(path).parts[-2:]), read_file(path)
        got = self.cameras(task, read)
        if isinstance(got, Skip):
            return got
        sample, (files, source, stored) = got
        sample = encode_sample(self.spec, task.key, sample, task.labels)
        for reader in self.readers:
            path = task.sensor_paths[reader.name]
            got = self._extra(reader, path)
            if not isinstance(got, dict):
                return skip_of(task, "/".join(Path(path).parts[-2:]), got)
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
            if _is_problem(got):
                return skip_of(task, files[cam], got)
            images[cam], source[cam], stored[cam] = got
        return images, (files, source, stored)

    def _extra(self, r: Reader, path: str) -> dict[str, bytes] | Problem:
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
            if r.read in box_parsers():   # a box file: its dataset's registered parser
                return self._boxes(r, decode_json(data, r.gz))
            if r.read == "camera":
                got = self._camera(data, r.member)
                return got if _is_problem(got) else {r.member: got[0]}
            codec = codec_named(r.codec)
            # point clouds are decoded once here: a corrupt LAZ chunk or a NaN point is
            # invisible to the header check, and the loader would meet it mid-epoch
            full = getattr(codec, "check_full", None)
            problem = full(data, self._columns(r)) if full else codec.check(data)
            return problem if problem else {r.member: data}
        except SchemaError as exc:   # its reason only: the Skip adds the pack's own fix
            return exc.reason
        except LimitError as exc:   # a bomb's header, refused before anything is allocated
            return limit_problem(exc)
        except (ValueError, OSError) as exc:
            return str(exc)

    def _columns(self, r: Reader) -> int | None:
        """The column count the spec declares for a point-cloud member (None: any)."""
        shape = self.spec.extra(r.name).shape
        return shape[1] if len(shape) == 2 else None

    @staticmethod
    def _boxes(r: Reader, entries: object) -> dict[str, bytes]:
        # the raw JSON's own conventions: the parser its dataset registers for the reader
        typed = box_parser(r.read)(entries)
        out = {r.member: codec_named("npy").encode(typed)}
        if r.raw_member:
            out[r.raw_member] = codec_named("json").encode(entries)
        return out

    def _camera(self, data: bytes, member: str
                ) -> tuple[bytes, tuple[int, int], tuple[int, int]] | Problem:
        """(bytes to store, source size, stored size), or the problem that makes it a bad frame."""
        src: ImageCodec = codec_for(f"image.{self.source_ext}")
        try:
            size, problem = src.size(data), None
        except ImageHeaderError as exc:
            size, problem = None, f"{exc}; expected a {self.source_ext} image whose header " \
                "gives its size"
        if size is not None and size[0] * size[1] > limits.active().image_pixels:
            return too_large(*size)   # from its header, before any decoder allocates
        problem = src.check(data) or problem
        rgb = None
        if problem is None and self.decodes:
            try:
                rgb = src.decode(data)
            except LimitError as exc:   # its header, before the decoder allocated
                return limit_problem(exc)
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
    """Each camera's image size, and each extra image member's (depth, semantics, BEV,
    instance: `extras`, by member), taken from the stream's first sample: a frame whose image
    differs is a bad frame, and the sizes go into the manifest (the loader refuses members
    whose header disagrees) and the journal (a resume does not read the first images)."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.source = {c: tuple(v) for c, v in meta.get("source_sizes", {}).items()}
        self.stored = {c: tuple(v) for c, v in meta.get("image_sizes", {}).items()}
        self.extras = {m: tuple(v) for m, v in meta.get("extra_sizes", {}).items()}
        self.first = dict(meta.get("first_files", {}))

    def meta(self) -> dict[str, Any]:
        return {"source_sizes": {c: list(v) for c, v in self.source.items()},
                "image_sizes": {c: list(v) for c, v in self.stored.items()},
                "extra_sizes": {m: list(v) for m, v in self.extras.items()},
                "first_files": self.first}

    def check(self, item: Encoded) -> dict[str, Any] | Skip:
        if not self.source:
            for cam, (h, w) in item.stored_sizes.items():
                if not (h and w and h * w <= limits.active().image_pixels):
                    return skip_of(item, item.files[cam], too_large(h, w))   # loader: refused
            self.source, self.stored = dict(item.source_sizes), dict(item.stored_sizes)
            self.first = {c: f"{item.episode}/{f}" for c, f in item.files.items()}
        else:
            for cam, (h, w) in item.source_sizes.items():
                if (h, w) != self.source[cam]:
                    eh, ew = self.source[cam]
                    return Skip(item.episode, item.frame, item.files[cam],
                                f"image is {h}x{w} (HxW) but {self.first[cam]}, the first "
                                f"{cam} image, is {eh}x{ew}; expected one size per camera")
        return self._check_extras(item)

    def _check_extras(self, item: Encoded) -> dict[str, Any] | Skip:
        """Each extra image member's header size against the first frame's (the codecs have
        held it to image_pixels already, before decoding)."""
        cameras = {f"{c}.{ext}" for c in item.stored_sizes for ext in IMAGE_FORMATS}
        for member, data in item.sample.items():
            if member in cameras or member.rsplit(".", 1)[-1] not in IMAGE_FORMATS:
                continue
            try:
                hw = image_size(data)
            except ImageHeaderError as exc:
                return Skip(item.episode, item.frame, member, f"{exc}; expected an image")
            first = self.extras.setdefault(member, hw)
            if hw != first:
                return Skip(item.episode, item.frame, member,
                            f"image is {hw[0]}x{hw[1]} (HxW) but the first {member} is "
                            f"{first[0]}x{first[1]}; expected one size per image field")
        return item.sample
