"""What a valid manifest.json looks like, checked whenever one is read.

A manifest is data from a file, possibly from a web server or a shared folder: its counts
decide how many samples are read from each shard, and its sizes bound every read. A count that
is negative, a float or lower than the tar holds would otherwise drop or invent samples without
a word, so every field the loader and the tools use is checked here, and an error names the
manifest and the field.
"""
from __future__ import annotations

import re
from typing import Any

from . import limits
from .datasets import transforms as load_transforms
from .extras import extras_from_doc
from .schema import (
    CAMERAS,
    CODECS,
    IMAGE_FORMATS,
    LABEL_MEMBERS,
    READABLE_VERSIONS,
    SchemaError,
)

MAX_MANIFEST_BYTES = 256 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(SchemaError):
    """A manifest that cannot be trusted as written; names the manifest and the field."""


def _int(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check(ok: bool, where: str, field: str, value: Any, expected: str) -> None:
    if not ok:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise ManifestError(f"manifest {where}: {field} is {shown}; expected {expected}. Fix: "
                            "re-pack, or restore the manifest that `carla-wds pack` wrote")


def validate_manifest(m: Any, where: str) -> None:
    """Raise ManifestError unless `m` is a manifest this carla-wds can trust."""
    _check(isinstance(m, dict), where, "the document", type(m).__name__, "a JSON object")
    version = m.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ManifestError(f"manifest {where}: schema_version {version!r}, this carla-wds "
                            f"reads {list(READABLE_VERSIONS)}. Fix: re-pack with this version, "
                            "or upgrade carla-wds to the one that packed it")
    cams = m.get("cameras")
    _check(isinstance(cams, list) and len(cams) > 0 and all(c in CAMERAS for c in cams)
           and len(set(cams)) == len(cams), where, "cameras", cams,
           f"a list of distinct names from {list(CAMERAS)}")
    _check(_int(m.get("pred_len"), 1), where, "pred_len", m.get("pred_len"), "an integer >= 1")
    fmt = m.get("image_format", "png")
    _check(fmt in IMAGE_FORMATS, where, "image_format", fmt, f"one of {list(IMAGE_FORMATS)}")
    _check_image_sizes(m.get("image_sizes"), cams, where)
    _check_spec(m.get("spec"), where)
    extras = [e["member"] for e in (m.get("spec") or {}).get("extras", [])]
    if m.get("extra_sizes") is not None:   # packs before it recorded none: limits apply
        _check_sizes(m["extra_sizes"], extras, where, "extra_sizes", "extra member")
    _check_members(m.get("members"), [f"{c}.{fmt}" for c in cams] + list(LABEL_MEMBERS) + extras,
                   where)
    shards = m.get("shards")
    _check(isinstance(shards, list), where, "shards", shards, "a list")
    names: set[str] = set()
    for i, s in enumerate(shards):
        _check_shard(s, f"shards[{i}]", where)
        _check(s["name"] not in names, where, f"shards[{i}].name", s["name"],
               "a name no other shard has (the manifest lists it twice)")
        names.add(s["name"])
    total = m.get("total_samples")
    _check(_int(total) and total == sum(s["samples"] for s in shards), where, "total_samples",
           total, f"the sum of the shards' samples, {sum(s['samples'] for s in shards)}")
    for field, kind in (("counts", dict), ("skipped", list), ("pack_args", dict),
                        ("filtered_routes", list)):
        if field in m:
            _check(isinstance(m[field], kind), where, field, m[field], f"a JSON {kind.__name__}")
    if "sample_rule" in m:
        _check_sample_rule(m["sample_rule"], where)


# What a pack made before the sample rule (issue 24) holds: every frame with a full future.
EVERY_FRAME = {"all_frames": True, "head": 0, "tail": 0, "loader": ""}


def sample_rule(m: dict[str, Any]) -> dict[str, Any]:
    """Which frames of each route the pack holds: the layout's loader's rule (`head` frames
    from a route's start, `tail` more before its last pred_len), or every frame with a full
    future (`all_frames`: --all-frames, and every pack made before the rule was recorded)."""
    return dict(m.get("sample_rule") or EVERY_FRAME)


def _check_sample_rule(rule: Any, where: str) -> None:
    _check(isinstance(rule, dict) and set(rule) == set(EVERY_FRAME), where, "sample_rule", rule,
           f"an object with {sorted(EVERY_FRAME)}")
    _check(isinstance(rule["all_frames"], bool), where, "sample_rule.all_frames",
           rule["all_frames"], "true or false")
    for key in ("head", "tail"):
        _check(_int(rule[key]), where, f"sample_rule.{key}", rule[key], "an integer >= 0")
    _check(isinstance(rule["loader"], str), where, "sample_rule.loader", rule["loader"],
           "a string")


def _check_shard(s: Any, field: str, where: str) -> None:
    _check(isinstance(s, dict), where, field, s, "an object with name, samples, bytes, sha256")
    _check(isinstance(s.get("name"), str), where, f"{field}.name", s.get("name"), "a string")
    _check(_int(s.get("samples")), where, f"{field}.samples", s.get("samples"),
           "an integer >= 0")
    _check(_int(s.get("bytes")), where, f"{field}.bytes", s.get("bytes"), "an integer >= 0")
    _check(s.get("sha256") is None or (isinstance(s["sha256"], str)
                                        and bool(_SHA256.match(s["sha256"]))),
           where, f"{field}.sha256", s.get("sha256"), "64 lowercase hex digits")
    for k in ("first_key", "last_key"):   # optional (issue 27); the loader parses them
        _check(isinstance(s.get(k, ""), str) and len(s.get(k, "")) <= 1024, where,
               f"{field}.{k}", s.get(k), "a sample key (a string)")
    steps = s.get("steps", {})
    _check(isinstance(steps, dict) and len(steps) <= 4096 and all(
        isinstance(k, str) and k.lstrip("-").isdigit() and _int(v) for k, v in steps.items()),
        where, f"{field}.steps", steps, "an object {frame step: count >= 0}")
    _check_buckets(s.get("buckets", {}), s, f"{field}.buckets", where)


def _check_buckets(buckets: Any, shard: dict, field: str, where: str) -> None:
    """A shard's bucket runs (pack/buckets.py): every bucket's runs give each of the shard's
    samples one value, so their counts add up to its samples. A mix expands them into one
    value per sample (load/plan/mix.py): runs claiming 10^10 samples would allocate that many."""
    _check(isinstance(buckets, dict) and len(buckets) <= 64 and all(
        isinstance(name, str) and isinstance(runs, list)
        and all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                and _int(r[1], 1) for r in runs)
        for name, runs in buckets.items()), where, field, "(runs)",
        "an object {bucket: [[value, count >= 1], ...]}")
    for name, runs in buckets.items():
        claimed = sum(r[1] for r in runs)   # plain ints: nothing is expanded here
        if claimed != shard["samples"]:
            raise ManifestError(
                f"manifest {where}: {field}.{name} runs give {claimed} samples a value, but "
                f"shard {shard['name']!r:.100} holds {shard['samples']} samples; expected one "
                "value per sample. "
                "Fix: re-pack, or restore the manifest that `carla-wds pack` wrote")


def _check_image_sizes(sizes: Any, cams: list[str], where: str) -> None:
    if sizes is None:
        return   # packs written before sizes were recorded: the loader caps pixels instead
    _check(isinstance(sizes, dict) and set(sizes) == set(cams), where, "image_sizes", sizes,
           "an object with one [height, width] per camera")
    _check_sizes(sizes, cams, where, "image_sizes", "camera")


def _check_sizes(sizes: Any, names: list[str], where: str, field: str, what: str) -> None:
    """{name: [H, W]} for some of `names`, each within image_pixels (a recorded size only
    ever tightens the limit)."""
    _check(isinstance(sizes, dict) and set(sizes) <= set(names), where, field, sizes,
           f"an object with [height, width] per {what}")
    pixels = limits.active().image_pixels
    for name, hw in sizes.items():
        _check(isinstance(hw, list) and len(hw) == 2 and all(_int(v, 1) for v in hw)
               and hw[0] * hw[1] <= pixels, where, f"{field}.{name}", hw,
               f"[height, width] of positive integers, at most {pixels} pixels (image_pixels)")


def _check_spec(spec: Any, where: str) -> None:
    """spec (version 2): extra members, label frames and load transforms, all plain data."""
    if spec is None:
        return
    _check(isinstance(spec, dict), where, "spec", spec, "an object with extras, frames, "
           "transforms")
    try:
        extras_from_doc(spec.get("extras", []), f"manifest {where}")
    except SchemaError as exc:
        raise ManifestError(f"{exc}. Fix: re-pack, or restore the manifest that `carla-wds "
                            "pack` wrote") from None
    frames, transforms = spec.get("frames", {}), spec.get("transforms", [])
    _check(isinstance(frames, dict) and all(isinstance(v, str) for v in frames.values()),
           where, "spec.frames", frames, "an object of label -> convention name")
    known = list(load_transforms())
    _check(isinstance(transforms, list) and all(t in known for t in transforms),
           where, "spec.transforms", transforms, f"a list from {known}")


def _check_members(members: Any, expected: list[str], where: str) -> None:
    """members: member -> codec name; absent in packs made before codec names were recorded
    (the loader then takes each member's codec from its suffix)."""
    if members is None:
        return
    _check(isinstance(members, dict) and all(m in members for m in expected), where, "members",
           members, f"an object naming the codec of each of {expected}")
    for member, name in members.items():
        _check(isinstance(name, str) and name in CODECS, where, f"members.{member}", name,
               f"a codec this carla-wds has ({sorted(CODECS)}); upgrade carla-wds to read it")
