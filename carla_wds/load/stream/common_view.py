"""Mixing packs of different layouts (issue 40): the common view every pack's samples are
served in, built once at construction, and the worker stage that puts each sample into it
before decoding, so that one SampleSpec decodes every pack.

    CARLAWebData(mix={"entries": [{"source": "shards/a", "weight": 1},
                                  {"source": "shards/b", "weight": 1,
                                   "cameras": {"front": "rgb_front_0"}}],   # common <- own
                      "view": {"waypoint_hz": 2, "pred_len": 4}},          # optional
                 cameras=["front"], image_size=(128, 256), batch_size=8)

The view (docs/mixing.md): the selected cameras under their common names, at one image_size;
speed (m/s), the command (one-hot), the target point and the waypoints in one ego frame,
COMMON_FRAME: right-handed, x forward, y left, metres from the vehicle origin. Each pack's
labels are converted from the frame its manifest names (spec.frames) with the frame table of
the dataset rooms (carla_wds.datasets.frame); waypoints are resampled to one rate (each pack's
waypoint rate a whole multiple of it) and cut to one pred_len; waypoints_diff is taken again
from the served waypoints. Extra fields only where every pack records the same member. Where
no view exists (no camera in common, rates that do not divide, a field one pack lacks), the
loader refuses at construction in one line naming what differs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from ... import limits
from ...codecs import ImageHeaderError, codec_named
from ...datasets import Frame, canonical_frame, frame
from ...manifest import Manifest
from ...schema import LABEL_MEMBERS, SampleSpec, SchemaError
from ..plan.mix import MixError, same_samples

# the view's ego frame: point = axes @ (right, forward) + origin = (forward, left)
COMMON_FRAME = Frame(((0.0, 1.0), (-1.0, 0.0)))
COMMON_FRAME_DOC = "right-handed, x forward, y left, metres from the vehicle origin"
POINT_LABELS = ("target_point", "waypoints")
VIEW_KEYS = ("waypoint_hz", "pred_len")
# what an Extra must agree on in every pack to be served in the view
EXTRA_KEYS = ("member", "codec", "modality", "dtype", "shape", "frame", "twin_of", "fields",
              "classes")


class ViewError(MixError):
    """Packs with no common view; one line naming what differs and the fix."""


def affine(src: Frame, dst: Frame = COMMON_FRAME) -> tuple[np.ndarray, np.ndarray]:
    """(M, b) with dst_point = M @ src_point + b, through (right, forward) metres; the
    frames' axes are orthonormal, so the inverse of src's is its transpose."""
    a, o = np.asarray(src.axes, np.float64), np.asarray(src.origin, np.float64)
    m = np.asarray(dst.axes, np.float64) @ a.T
    return m, np.asarray(dst.origin, np.float64) - m @ o


@dataclass(frozen=True)
class PackView:
    """How one pack's samples enter the view."""
    where: str
    members: tuple[tuple[str, str], ...]      # (common image member, own image member)
    sizes: tuple[tuple[int, int] | None, ...]  # the own cameras' packed (H, W)
    codecs: tuple[tuple[str, str], ...]        # label member -> own codec name
    points: tuple[tuple[str, tuple[float, ...]], ...]   # label -> M (4) and b (2), flat
    every: int                                  # waypoint k of the view is own (k+1)*every-1

    def into(self, raw: dict[str, Any], view: "CommonView") -> dict[str, Any]:
        """The raw sample with its cameras under their common names and its labels in the
        view (encoded again with the view's codecs); other members kept."""
        where = f"shard {raw.get('__shard__')} sample {raw.get('__key__')!r}"
        owned = {own for _, own in self.members}
        out = {k: v for k, v in raw.items() if k not in owned}
        for (common, own), size in zip(self.members, self.sizes):
            data = raw[own]
            try:
                codec_named(view.image_codec(own)).check_size(
                    data, size, limits.active().image_pixels)
            except ImageHeaderError as exc:
                raise SchemaError(f"{where}: {own}: {exc}") from None
            out[common] = data
        own = dict(self.codecs)
        labels = {f"{n}.npy": codec_named(own[f"{n}.npy"]).decode(raw[f"{n}.npy"])
                  for n in POINT_LABELS}
        pts = dict(self.points)
        for name in POINT_LABELS:
            m, b = np.reshape(pts[name][:4], (2, 2)), np.asarray(pts[name][4:])
            value = np.asarray(labels[f"{name}.npy"], np.float64)
            if name == "waypoints":
                value = value[self.every - 1::self.every][:view.spec.pred_len]
            labels[f"{name}.npy"] = (value @ m.T + b).astype(np.float32)
        wp = labels["waypoints.npy"]
        labels["waypoints_diff.npy"] = np.diff(np.concatenate([np.zeros((1, 2), np.float32),
                                                               wp]), axis=0)
        for member in LABEL_MEMBERS:   # the others as stored, in the view's codec
            codec = view.spec.codec(member)
            if member in labels:
                out[member] = codec.encode(labels[member])
            elif own[member] != codec.name and member in raw:
                out[member] = codec.encode(codec_named(own[member]).decode(raw[member]))
        return out


@dataclass(frozen=True)
class CommonView:
    """The view's SampleSpec, each pack's way into it, and each shard's pack."""
    spec: SampleSpec
    packs: tuple[PackView, ...]
    shard_pack: tuple[tuple[str, int], ...]   # shard url -> its pack
    waypoint_hz: float | None
    own_codecs: tuple[tuple[str, str], ...] = ()   # own image member -> its codec

    def image_codec(self, own: str) -> str:
        return self._codec_of[own]

    @cached_property
    def _codec_of(self) -> dict[str, str]:   # looked up per camera and sample: built once
        return dict(self.own_codecs)

    def sample(self, raw: dict[str, Any] | None, packs: Mapping[str, int]) -> Any:
        if raw is None or "__error__" in raw:
            return raw
        return self.packs[packs[raw["__shard__"]]].into(raw, self)

    def describe(self) -> str:
        hz = f" at {self.waypoint_hz:g} Hz" if self.waypoint_hz else ""
        return (f"cameras {list(self.spec.cameras)}, pred_len {self.spec.pred_len}{hz}, "
                f"labels in ({COMMON_FRAME_DOC})")


@dataclass(frozen=True)
class IntoView:
    """Worker stage (pipeline.py), after the groups are cut and before they are decoded:
    every sample of a group into the common view. A sample that cannot be put there is
    refused (on_error="raise") or skipped as a decode error would be."""
    view: CommonView

    def __call__(self, groups: Iterable[list], at: Any) -> Iterator[list]:
        packs, skip = dict(self.view.shard_pack), at.e.on_error != "raise"
        for group in groups:
            yield [self._one(raw, packs, skip) for raw in group]

    def _one(self, raw: Any, packs: Mapping[str, int], skip: bool) -> Any:
        try:
            return self.view.sample(raw, packs)
        except (SchemaError, ValueError, KeyError) as exc:
            if not skip:
                raise
            return {"__key__": raw.get("__key__"), "__error__": str(exc)}


def alike(manifests: list[Manifest]) -> bool:
    """Whether the packs hold alike samples (mix.same_samples accepts them): then no view, and
    they are served as they are."""
    try:
        same_samples(manifests)
    except MixError:
        return False
    return True


def of(spec: Any, manifests: list[Manifest], cameras: list[str] | None,
       fields: list[str] | None) -> CommonView | None:
    """A mix's common view (spec: mix.MixSpec), or None where its packs hold alike samples
    (served as they are, as before views existed); ViewError where none exists."""
    if spec is None:
        return None
    if alike(manifests):
        _unused(spec)
        return None
    sources = spec.sources()
    maps = [_camera_map(spec, s) for s in sources]
    names = _cameras(manifests, maps, cameras)
    hz, every, pred_len = _rates(manifests, dict(spec.view))
    fmt = _image_format(manifests)
    first = manifests[0]
    image_codecs = {f"{c}.{fmt}": ("png" if fmt != first.spec.image_format else
                                   first.spec.codec(f"{maps[0].get(c, c)}.{fmt}").name)
                    for c in names}
    extras = _extras(manifests, fields)
    codecs = {**image_codecs, **{m: first.spec.codec(m).name for m in LABEL_MEMBERS},
              **{e.member: e.codec for e in extras}}
    transforms = tuple(t for t in first.spec.transforms
                       if all(t in m.spec.transforms for m in manifests))
    view_spec = SampleSpec(tuple(names), pred_len, fmt, tuple(sorted(codecs.items())), extras,
                           tuple((n, _frame_name()) for n in POINT_LABELS), transforms)
    packs, own_codecs = [], {}
    for m, cams, k in zip(manifests, maps, every):
        own = [f"{cams.get(c, c)}.{m.spec.image_format}" for c in names]
        own_codecs.update({o: m.spec.codec(o).name for o in own})
        packs.append(PackView(m.where, tuple(zip(view_spec.image_members, own)),
                              m.sizes_of(tuple(o.rsplit(".", 1)[0] for o in own)),
                              tuple((x, m.spec.codec(x).name) for x in LABEL_MEMBERS),
                              _points(m), k))
    shard_pack = tuple((u, i) for i, m in enumerate(manifests) for u in m.shard_urls())
    return CommonView(view_spec, tuple(packs), shard_pack, hz, tuple(own_codecs.items()))


def _unused(spec: Any) -> None:
    """A view's options on packs of alike samples would be ignored: refused instead."""
    renamed = sorted({f"{e.source}: {dict(e.cameras)}" for e in spec.entries
                      if any(common != own for common, own in e.cameras)})
    if spec.view or renamed:
        given = f"view={dict(spec.view)}" if spec.view else f"cameras ({'; '.join(renamed)})"
        raise ViewError(f"mix: {given} shapes the common view of packs of different layouts, "
                        "but these packs hold alike samples, served as they are. Fix: drop the "
                        "mix's view: and its entries' cameras:, and select cameras with "
                        "cameras=[...]")


def _frame_name() -> str:
    """The frame table's name of COMMON_FRAME (the dataset rooms name every frame)."""
    from ...datasets import frames
    return next(n for n, f in sorted(frames().items()) if f == COMMON_FRAME)


def _camera_map(spec: Any, source: str) -> dict[str, str]:
    """common camera name -> the source's own, from its entries (which must agree)."""
    given = {e.cameras for e in spec.entries if e.source == source}
    if len(given) > 1:
        raise ViewError(f"mix: the entries of {source} give other cameras "
                        f"{sorted(map(dict, given), key=str)}; one source has one camera "
                        "choice. Fix: the same cameras in each of its entries")
    return dict(given.pop())


def _cameras(manifests: list[Manifest], maps: list[dict[str, str]],
             cameras: list[str] | None) -> list[str]:
    """The common camera names: the caller's, each in every pack (under its entry's name for
    it), or those every pack holds."""
    held = [[c for c in m.spec.cameras] for m in manifests]
    offer = [[*cams, *[c for c in h if c not in cams.values() and c not in cams]]
             for h, cams in zip(held, maps)]
    names = list(cameras) if cameras is not None else \
        [c for c in offer[0] if all(c in o for o in offer[1:])]
    where = "; ".join(f"{m.where} holds {h}" for m, h in zip(manifests, held))
    if not names:
        raise ViewError(f"mix of packs of different layouts: no camera in common ({where}). "
                        "Fix: cameras=[NAME] and each entry's cameras: {NAME: its own camera}")
    for m, h, cams in zip(manifests, held, maps):
        lack = [c for c in names if cams.get(c, c) not in h]
        if lack:
            raise ViewError(f"mix: cameras {lack} are not in {m.where} (it holds {h}; {where}). "
                            "Fix: its entry's cameras: {COMMON: ITS_OWN}, or other cameras=")
    return names


def waypoint_hz(view: CommonView | None, manifest: Manifest) -> float | None:
    """The served waypoints' rate: the view's, or the pack's record (None: unrecorded)."""
    return view.waypoint_hz if view is not None else _rate(manifest)


def _rate(m: Manifest) -> float | None:
    spec = m.doc.get("spec") or {}
    hz = spec.get("waypoint_rate_hz", spec.get("rate_hz"))
    return float(hz) if hz else None


def _rates(manifests: list[Manifest], view: Mapping[str, Any]
           ) -> tuple[float | None, list[int], int]:
    """(the view's waypoint rate, each pack's step between kept waypoints, pred_len): equal
    rates and pred_len as they are; else every pack resampled to the lowest rate (or the
    view's waypoint_hz), each rate a whole multiple of it, cut to the shortest horizon."""
    rates, lens = [_rate(m) for m in manifests], [m.spec.pred_len for m in manifests]
    told = [f"{m.where} {n} at {r if r else '?'} Hz" for m, n, r in zip(manifests, lens, rates)]
    if len(set(rates)) == 1 and "waypoint_hz" not in view:
        shortest = min(lens)
        return rates[0], [1] * len(lens), _pred_len(view, shortest, told)
    if None in rates:
        raise ViewError(f"mix: waypoints of other counts or rates and a pack that records no "
                        f"rate ({'; '.join(told)}). Fix: mix packs of one pred_len and rate")
    hz = float(view.get("waypoint_hz") or min(rates))
    steps = [r / hz for r in rates]
    if not all(s >= 1 and math.isclose(s, round(s)) for s in steps):
        raise ViewError(f"mix: waypoints at {sorted(set(rates))} Hz cannot all be resampled "
                        f"to {hz:g} Hz ({'; '.join(told)}). Fix: view: {{waypoint_hz: H}} with "
                        "every rate a whole multiple of H")
    every = [round(s) for s in steps]
    return hz, every, _pred_len(view, min(n // k for n, k in zip(lens, every)), told)


def _pred_len(view: Mapping[str, Any], most: int, told: list[str]) -> int:
    n = view.get("pred_len", most)
    if most < 1 or not (isinstance(n, int) and 1 <= n <= most):
        raise ViewError(f"mix: view pred_len {n!r}; the packs give at most {most} waypoints "
                        f"in common ({'; '.join(told)}). Fix: view: {{pred_len: N}}, 1 <= N <= "
                        f"{most}")
    return n


def _image_format(manifests: list[Manifest]) -> str:
    """One format: the packs', or png (every camera decoded whole) for png and jpg packs."""
    formats = sorted({m.spec.image_format for m in manifests})
    if len(formats) == 1:
        return formats[0]
    if set(formats) <= {"png", "jpg"}:
        return "png"
    raise ViewError(f"mix: images stored as {formats} "
                    f"({'; '.join(f'{m.where} {m.spec.image_format}' for m in manifests)}); a "
                    "raw pack mixes only with raw packs. Fix: re-pack with one --image-format")


def _extras(manifests: list[Manifest], fields: list[str] | None) -> tuple:
    """The extra members every pack records alike (no camera twins); a selected field that
    one pack lacks, or records otherwise, is refused naming the pack."""
    def same(a: Any, b: Any) -> bool:
        return all(getattr(a, k) == getattr(b, k) for k in EXTRA_KEYS)
    common = tuple(e for e in manifests[0].spec.extras if e.twin_of is None and all(
        any(x.name == e.name and same(x, e) for x in m.spec.extras) for m in manifests[1:]))
    names = {e.name for e in common}
    for f in fields or ():
        if f in names:
            continue
        lack = [m.where for m in manifests if f not in {e.name for e in m.spec.extras}]
        why = f"{lack} lack it" if lack else "the packs record it otherwise (member, codec, " \
            "shape or frame)"
        raise ViewError(f"mix of packs of different layouts: field {f!r} is served only when "
                        f"every pack holds it alike; {why}. Fix: fields= of {sorted(names)}")
    return common


def _points(m: Manifest) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """Each point label's map into COMMON_FRAME, from the frame the pack names for it."""
    from ...datasets import DEFAULT_FRAME
    named = dict(m.spec.frames)
    out = []
    for label in POINT_LABELS:
        try:
            src = frame(canonical_frame(named.get(label, DEFAULT_FRAME)))
        except ValueError as exc:
            raise ViewError(f"mix: {m.where} {label}: {exc}") from None
        mat, b = affine(src)
        out.append((label, (*mat.ravel().tolist(), *b.tolist())))
    return tuple(out)


def model(view: CommonView, r: Any) -> tuple[None, Any, dict[str, Any], dict[str, Any]]:
    """front.model for a view: no model adapter (each reads one layout's samples); the
    caller's own transform, cameras, fields and one image_size."""
    if r.adapter is not None:
        raise ViewError(f"adapter={r.adapter!r} reads one layout's samples, and this mix "
                        f"serves the packs' common view ({view.describe()}). Fix: "
                        "adapter=your function fn(sample, rng) over the view, or a mix of one "
                        "layout")
    size = r.image_size or view_size(view)
    return None, r.transform, {"cameras": r.cameras, "image_size": size, "fields": r.fields,
                               "lidar_histogram": r.decode.lidar_histogram}, r.label_options


def view_size(view: CommonView) -> tuple[int, int]:
    """The packed size of every selected camera where all agree; else refused."""
    sizes = {s for p in view.packs for s in p.sizes}
    if len(sizes) == 1 and None not in sizes:
        return sizes.pop()
    told = "; ".join(f"{p.where} {list(p.sizes)}" for p in view.packs)
    raise ViewError(f"mix: the cameras are stored at other sizes ({told}). Fix: "
                    "image_size=(H, W), the one size the view serves")


def extra_sizes(view: CommonView, manifests: list[Manifest]) -> tuple:
    """The extra image members' recorded sizes where every pack records the same."""
    docs = [dict((m.doc.get("extra_sizes") or {})) for m in manifests]
    members = {e.member for e in view.spec.extras}
    return tuple(sorted((k, tuple(v)) for k, v in docs[0].items() if v and k in members
                        and all(d.get(k) == v for d in docs[1:])))


__all__ = ["COMMON_FRAME", "COMMON_FRAME_DOC", "CommonView", "IntoView", "PackView",
           "ViewError", "affine", "alike", "extra_sizes", "model", "of", "view_size",
           "waypoint_hz"]
