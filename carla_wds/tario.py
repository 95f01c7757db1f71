"""Reading tar streams the way carla-wds writes shards, bounded by what the manifest declares.

One read per header and per member, with no copies: the loader's hot path (docs/benchmarks.md).
"""
from __future__ import annotations

import io
import re
from typing import Any, Iterator

from . import limits

_FIX = "Fix: re-download or re-pack it"


class ShardError(RuntimeError):
    """A shard that cannot be read as the manifest describes; names the shard and sample."""


_BLOCK = 512
_META = re.compile(r"__[^/]*__($|/)")   # webdataset's skip_meta


def _read_exact(stream: io.BufferedIOBase, n: int) -> bytes:
    """n bytes, looping over short reads (pipes, HTTP); fewer only at the end of the stream."""
    data = stream.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    while n - sum(map(len, parts)) > 0 and (more := stream.read(n - sum(map(len, parts)))):
        parts.append(more)
    return b"".join(parts)


def _tar_number(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):   # GNU base-256, for sizes of 8 GiB and more
        return int.from_bytes(field[1:], "big", signed=field[:1] == b"\xff")
    return int(field.rstrip(b"\0 ").lstrip(b" ") or b"0", 8)


def tar_members(stream: io.BufferedIOBase, where: str, limit: int | None = None,
                others: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """{"fname", "data"} of each regular member of an uncompressed tar stream, in order
    (data: bytes, or a memoryview for the large members of a MappedShard).

    Reads ustar, GNU long names and PAX `path` records (what carla-wds, webdataset's TarWriter
    and GNU tar write), with one read per header and per member: tarfile's stream mode copies
    its 10 KB buffer for every slice, a fifth of the loader's time (docs/benchmarks.md).
    A member larger than what is left of the `limit` bytes the manifest declares is refused
    before it is read, and so is one over the limit `member_bytes` (limits.py): a member is
    held in memory whole, so that limit, not the size a shard declares, bounds what reading
    it allocates. Links, folders and other non-files are skipped, and named in `others`.
    """
    long_name, pos, member_limit = None, 0, limits.active().member_bytes
    while (header := _read_exact(stream, _BLOCK)) and header.count(0) < _BLOCK:
        if len(header) < _BLOCK:
            raise ShardError(f"shard {where}: a tar header is cut short (truncated shard). "
                             f"{_FIX}")
        stored = _tar_number(header[148:156])
        if stored != sum(header[:148]) + 256 + sum(header[156:]):
            raise ShardError(f"shard {where}: a tar header fails its checksum; the shard is "
                             f"corrupt. {_FIX}")
        size, kind = _tar_number(header[124:136]), header[156:157]
        pos += _BLOCK + size + -size % _BLOCK
        _check_member(where, size, pos, limit, member_limit)
        data = _read_exact(stream, size)
        if len(data) < size or len(_read_exact(stream, -size % _BLOCK)) < -size % _BLOCK:
            raise ShardError(f"shard {where}: a tar member is cut short (truncated shard). "
                             f"{_FIX}")
        if kind == b"x":    # PAX: "<len> key=value\n" records; only path matters here
            for record in bytes(data).decode("utf-8", "replace").splitlines():
                if " path=" in record:
                    long_name = record.split(" path=", 1)[1]
            continue
        if kind == b"L":
            long_name = bytes(data).rstrip(b"\0").decode("utf-8", "replace")
            continue
        name = long_name or _ustar_name(header)
        long_name = None
        if kind not in (b"0", b"\0", b"7"):   # directories, links, global headers
            if others is not None and kind != b"g":
                others.append(f"{name} (tar type {kind.decode('latin-1')!r})")
            continue
        if not _META.match(name):
            yield {"fname": name, "data": data}


def _check_member(where: str, size: int, end: int, limit: int | None, member_limit: int
                  ) -> None:
    """Before a member is read: it ends (at `end`) within the shard's declared `limit`, and
    it is no larger than the member limit."""
    if limit is not None and (end > limit or size < 0):
        raise ShardError(f"shard {where}: a tar member declares {size} bytes, beyond the "
                         f"{limit} bytes the manifest declares for the whole shard; the "
                         "shard is corrupt or hostile. Fix: re-download or re-pack it")
    if size > member_limit:
        raise ShardError(str(limits.LimitError(f"shard {where}: a tar member's size in bytes",
                                               size, "member_bytes", member_limit)))


def _ustar_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
    prefix = header[345:500].split(b"\0", 1)[0] if header[257:262] == b"ustar" else b""
    return prefix.decode("utf-8", "replace") + "/" + name if prefix else name


def iterate_tar(stream: Any, where: str, limit: int | None = None,
                others: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """tar_members of a plain tar (what carla-wds writes); anything else, a compressed tar
    included, is refused before a byte of it is parsed."""
    first = b""
    if hasattr(stream, "peek"):
        first = stream.peek(_BLOCK)[:_BLOCK]
    elif getattr(stream, "seekable", lambda: False)():
        first = stream.read(_BLOCK)
        stream.seek(-len(first), io.SEEK_CUR)
    # a tar of no members is only its end-of-archive blocks (tarfile.open(p, "w").close())
    if len(first) == _BLOCK and (first[257:262] == b"ustar" or not any(first)):
        return tar_members(stream, where, limit, others)
    raise ShardError(f"shard {where}: not an uncompressed tar (no ustar header), as carla-wds "
                     f"writes shards. {_FIX}")


_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")   # webdataset's base_plus_ext


def group_samples(members: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Tar members -> samples {"__key__", "__url__", suffix: data}, by webdataset's rule: the
    key is the name up to the first dot of its last part, suffixes lower-cased, consecutive
    members of one key make one sample. (webdataset's own group_by_keys imports torch.)

    A sample is held whole until its key changes, so its members together are bounded by the
    limit `sample_bytes`: otherwise a stream of members with one key piles up to what the
    shard declares (a remote one: up to remote_shard_bytes, in memory)."""
    current: dict[str, Any] | None = None
    held, sample_limit = 0, limits.active().sample_bytes
    for m in members:
        match = _KEY.match(m["fname"])
        if not match:
            continue
        key, suffix = match.group(1), match.group(2).lower()
        if current is None or key != current["__key__"]:
            if current is not None:
                yield current
            current, held = {"__key__": key, "__url__": m.get("__url__")}, 0
        if suffix in current:
            raise ShardError(f"shard {current['__url__']}: {m['fname']} appears twice in one "
                             f"sample. {_FIX}")
        held += len(m["data"])
        if held > sample_limit:
            raise ShardError(str(limits.LimitError(
                f"shard {current['__url__']}: sample {key}'s members in bytes (up to "
                f"{m['fname']})", held, "sample_bytes", sample_limit)))
        current[suffix] = m["data"]
    if current is not None:
        yield current
