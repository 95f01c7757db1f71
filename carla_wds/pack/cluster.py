"""One part of a plan (plan_parts.py) packed by one process of a cluster job, and the state of
every part (`carla-wds pack-status`).

`pack --plan OUT/plan.json --part auto` takes its part from SLURM_ARRAY_TASK_ID (or `--part i`),
checks the input against the plan's fingerprint, and packs that part's episodes into
OUT/parts/<i>/ with --resume on: a part re-run after a kill, a preemption or a lost node goes on
from its journal (journal.py) to the same bytes. A part is complete when its manifest exists;
running it again then does nothing.

The states `pack-status` reports, per part:
- done: OUT/parts/<i>/manifest.json exists;
- failed: the pack recorded a failure (OUT/parts/<i>.failed, written when the pack raised, with
  its error line), or its journal has not been touched for `stale_s` seconds (a process killed
  by SIGKILL, the OOM killer or a preemption writes nothing, so an old journal is the only
  trace; the journal gets a line per committed shard, so a live pack touches it every shard);
- running: a journal younger than `stale_s` (on an s3:// OUT, any journal object: a listing
  carries no age, so a killed part there reads as running until its marker or a re-run);
- missing: nothing yet.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..codecs import json_loads
from ..fileio import atomic_write_bytes
from ..manifest import MANIFEST
from ..objstore import is_objstore
from ..objwrite import StoreWriter
from ..remote import RemoteOptions
from .errors import PackError
from .options import PackOptions
from .plan_parts import PLAN, check_input, discover, part_dir, read_plan, under
from .shards import JOURNAL

log = logging.getLogger(__name__)
_UNSAFE = {"Cc", "Cf", "Zl", "Zp"}   # Unicode categories of control and format characters
TASK_ENV = "SLURM_ARRAY_TASK_ID"
STALE_S = 3600.0


def resolve_part(text: str | None, parts: int, env: dict[str, str] | None = None) -> int:
    """--part auto (SLURM_ARRAY_TASK_ID), i, or i/P, checked against the plan's P."""
    env = os.environ if env is None else env
    if text in (None, "auto"):
        text = env.get(TASK_ENV)
        if text is None:
            raise PackError(f"--part auto: {TASK_ENV} is not set (not a SLURM array task). "
                            f"Fix: pass --part i with 0 <= i < {parts}, or submit with "
                            f"sbatch --array=0-{parts - 1}")
    head, _, tail = str(text).partition("/")
    try:
        i = int(head)
        ok = 0 <= i < parts and (not tail or int(tail) == parts)
    except ValueError:
        ok = False
    if not ok:
        raise PackError(f"--part {text}: the plan has parts 0..{parts - 1}. Fix: pass --part "
                        f"i with 0 <= i < {parts} (or --part auto in a SLURM array task)")
    return i


def _marker(out: str, i: int, parts: int) -> str:
    return under(out, part_dir(i, parts) + ".failed") if is_objstore(out) else \
        str(Path(out) / (part_dir(i, parts) + ".failed"))


def _set_marker(out: str, i: int, parts: int, error: str | None,
                remote: RemoteOptions | None = None) -> None:
    """Write (error) or remove (None) part i's failure marker."""
    where = _marker(out, i, parts)
    rel = part_dir(i, parts) + ".failed"
    if is_objstore(out):
        store = StoreWriter(out, remote, "OUT")
        if error is None:
            store.remove([rel])
        else:
            store.put_bytes(rel, _marker_doc(error))
        return
    if error is None:
        Path(where).unlink(missing_ok=True)
    else:
        Path(where).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(where, _marker_doc(error))


def _marker_doc(error: str) -> bytes:
    return (json.dumps({"error": error, "host": socket.gethostname(), "time": time.time(),
                        "job": os.environ.get("SLURM_JOB_ID")}) + "\n").encode()


def pack_part(input_dir: str, out: str, plan_path: str, part: str | None,
              opts: PackOptions) -> tuple[int, dict[str, Any] | None]:
    """Pack the plan's part into OUT/parts/<i>/; (i, manifest), or (i, None) when that part
    was complete already. On a failure the part's marker records the error line."""
    from .packer import pack   # the packer imports the datasets; keep `plan` light
    _plan_in(out, plan_path)
    plan = read_plan(plan_path, opts.remote())
    i = resolve_part(part, plan["parts"])
    if opts.layout != plan["layout"] or (opts.dataset_options or {}) != plan["dataset_options"]:
        raise PackError(f"--plan {plan_path} was made for --layout {plan['layout']} with "
                        f"{plan['dataset_options'] or 'no dataset options'}, not --layout "
                        f"{opts.layout} with {opts.dataset_options or 'none'}. Fix: pack with "
                        "the plan's layout and options, or plan again")
    target = under(out, part_dir(i, plan["parts"])) if is_objstore(out) else \
        str(Path(out) / part_dir(i, plan["parts"]))
    if _done(out, i, plan["parts"], opts.remote()):
        log.info("part %d is complete (%s/%s); nothing to do", i, target, MANIFEST)
        return i, None
    names = check_input(plan, input_dir, discover(input_dir, opts), i, opts)
    _set_marker(out, i, plan["parts"], None, opts.remote())
    opts = replace(opts, part=(i, plan["parts"]), select=tuple(names),
                   resume=not opts.overwrite)
    try:
        return i, pack(input_dir, target, opts)
    except Exception as exc:
        _set_marker(out, i, plan["parts"], str(exc).splitlines()[0] if str(exc) else
                    type(exc).__name__, opts.remote())
        raise


def _plan_in(out: str, plan_path: str) -> None:
    """The plan must be OUTPUT_DIR/plan.json: pack-status and merge --in-place read it there."""
    here = under(out, PLAN)
    same = plan_path.rstrip("/") == here if is_objstore(out) else \
        Path(plan_path).resolve() == Path(here).resolve()
    if not same:
        raise PackError(f"--plan {plan_path} is not OUTPUT_DIR's plan ({here}); pack-status "
                        f"and merge --in-place read the plan there. Fix: pass the plan's folder "
                        f"as OUTPUT_DIR (carla-wds pack INPUT_DIR OUT --plan OUT/{PLAN} ...)")


def _done(out: str, i: int, parts: int, remote: RemoteOptions) -> bool:
    if is_objstore(out):
        return f"{part_dir(i, parts)}/{MANIFEST}" in StoreWriter(out, remote, "OUT").listing()
    return (Path(out) / part_dir(i, parts) / MANIFEST).is_file()


def part_states(out: str, stale_s: float = STALE_S, now: float | None = None
                ) -> dict[int, tuple[str, str]]:
    """part -> (state, detail) for every part of OUT's plan (see the module's docstring)."""
    plan = read_plan(out)
    parts, now = plan["parts"], time.time() if now is None else now
    held = StoreWriter(out, None, "OUT").listing() if is_objstore(out) else None
    states = {}
    for i in range(parts):
        rel = part_dir(i, parts)
        if held is not None:
            states[i] = _state_listed(held, rel)
        else:
            states[i] = _state_local(Path(out), rel, stale_s, now)
    return states


def _state_listed(held: dict[str, int], rel: str) -> tuple[str, str]:
    if f"{rel}/{MANIFEST}" in held:
        return "done", ""
    if f"{rel}.failed" in held:
        return "failed", f"{rel}.failed"
    if any(n.startswith(rel + "/") for n in held):
        return "running", "objects under " + rel
    return "missing", ""


def _state_local(out: Path, rel: str, stale_s: float, now: float) -> tuple[str, str]:
    folder = out / rel
    if (folder / MANIFEST).is_file():
        return "done", ""
    marker = out / (rel + ".failed")
    if marker.is_file():
        try:
            return "failed", printable(json_loads(marker.read_bytes()).get("error", ""))
        except (ValueError, OSError, AttributeError):
            return "failed", str(marker)
    journal = folder / JOURNAL
    if journal.is_file():
        age = now - journal.stat().st_mtime
        if age > stale_s:
            return "failed", (f"journal untouched for {age:.0f} s (> --stale {stale_s:.0f}): "
                              "killed?")
        return "running", f"journal {age:.0f} s old"
    return "missing", ""


def printable(text: Any, limit: int = 2000) -> str:
    """A marker's text as one line that is safe on a terminal: control and format characters
    (newlines, ESC, BEL, bidi overrides) written as repr writes them, so that a marker cannot
    forge the lines pack-status prints (an --array= list) or drive the terminal."""
    text = str(text)
    safe = "".join(repr(c)[1:-1] if unicodedata.category(c) in _UNSAFE else c
                   for c in text[:limit])
    return safe + (f"... ({len(text)} characters)" if len(text) > limit else "")


def array_spec(parts: list[int]) -> str:
    """[3, 17, 40, 41, 42] -> '3,17,40-42' (sbatch --array's list syntax)."""
    runs: list[list[int]] = []
    for i in sorted(set(parts)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
