"""`carla-wds view SHARDS --out report.html`: one static HTML file a browser opens with no
server and no network: every picture inlined as a data: URI, the counts also as JSON in the
page (a script element of type application/json, for tools and tests). Written atomically."""
from __future__ import annotations

import base64
import html
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import atomic_write_bytes
from ..load import CARLAWebData
from ..progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ..remote import RemoteOptions
from ..words import counted
from .draw import bars_png, bev_png, speed_png
from .samples import bev_of, cameras_of, decode, scene_fields
from .scan import Row, ViewError, choose, command_name, counts, read_samples, scan

log = logging.getLogger(__name__)
DEFAULT_HEIGHT = 160   # camera height in the report (px), unless the pack's is smaller
RULE = ("strata of (route, command, speed bin); next the sample of the stratum whose "
        "route, command and speed bin were drawn least so far; ties and the sample within a "
        "stratum by the smallest sha256 of the key: deterministic")
_CSS = """body{font:14px sans-serif;margin:16px;background:#fafafa;color:#222}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(720px,1fr));gap:12px}
.row{display:flex;gap:6px;align-items:flex-start}.row .cams{flex:1}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}
.card h3{font-size:12px;margin:0 0 6px;word-break:break-all}
.cams{display:flex;flex-wrap:wrap;gap:4px;align-items:flex-start}.cams figure{margin:0}
figcaption{font-size:11px;color:#555}.cams img{height:80px}.bev{margin:0;flex:none}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}code{font-size:12px}"""


def _uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _img(data: bytes, mime: str, alt: str, cls: str = "") -> str:
    extra = f' class="{cls}"' if cls else ""
    return f'<img{extra} alt="{html.escape(alt)}" src="{_uri(data, mime)}">'


def default_size(data: CARLAWebData) -> tuple[int, int]:
    """(H, W): the first camera's recorded aspect at DEFAULT_HEIGHT (or its own height)."""
    size = data.manifest.sizes_of(data.spec.cameras)[0] or (DEFAULT_HEIGHT, 2 * DEFAULT_HEIGHT)
    h = min(DEFAULT_HEIGHT, int(size[0]))
    return h, max(1, round(h * size[1] / size[0]))


def _card(row: Row, cams: list[bytes], names: tuple[str, ...], bev: dict[str, Any]) -> str:
    command = command_name(row.command)
    title = f"{row.key} · {command} · {row.speed:.1f} m/s"
    figs = "".join(f"<figure>{_img(c, 'image/jpeg', n)}<figcaption>{html.escape(n)}"
                   "</figcaption></figure>" for c, n in zip(cams, names))
    panel = _img(bev_png(bev, "bird's-eye (m)"), "image/png", "bev")
    return (f'<div class="card" data-key="{html.escape(row.key)}" data-route="'
            f'{html.escape(row.route)}" data-command="{html.escape(command)}">'
            f'<h3>{html.escape(title)}</h3><div class="row"><div class="cams">{figs}</div>'
            f'<figure class="bev">{panel}</figure></div></div>')


def _charts(hist: dict[str, dict[str, int]], speeds: np.ndarray) -> str:
    pngs = [speed_png(speeds), bars_png("commands", hist["commands"]),
            bars_png("towns", hist["towns"]), bars_png("scenarios (clip or folder name)",
                                                       hist["scenarios"]),
            bars_png("skipped frames by reason (manifest)", hist["skipped"], "frames")]
    return "".join(_img(p, "image/png", "chart") for p in pngs)


# characters a script element's JSON must not hold raw: `<` (`</script>`, and `<!--<script>`,
# which keeps the element open past its end tag), `>`, `&`, and U+2028/2029 (line ends to
# JavaScript); each written as its JSON \u escape, which JSON.parse reads back unchanged
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                              "\u2028": "\\u2028", "\u2029": "\\u2029"})


def embed_json(doc: Any) -> str:
    """`doc` as JSON text safe inside <script type="application/json">, whatever its strings
    (route names come from the shards)."""
    return json.dumps(doc).translate(_SCRIPT_SAFE)


def render(title: str, head: str, cards: list[str], charts: str, doc: dict[str, Any]) -> str:
    """The page; `doc` is embedded as JSON (script#report-data)."""
    data = embed_json(doc)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<link rel="icon" href="data:,"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{head}"
            f'<h2>Labels</h2><div class="charts">{charts}</div>'
            f'<h2>Samples</h2><div class="grid">{"".join(cards)}</div>'
            f'<script type="application/json" id="report-data">{data}</script></body></html>')


def _head(data: CARLAWebData, rows: list[Row], chosen: list[Row]) -> str:
    doc = data.manifest.doc
    routes = len({r.route for r in rows})
    return (f"<p>layout <code>{html.escape(str(doc.get('layout')))}</code>, "
            f"{counted(len(rows), 'sample')} of {counted(routes, 'route')} in "
            f"{counted(len(data.manifest.shards), 'shard')}, "
            f"{counted(len(doc.get('skipped', [])), 'frame')} skipped, cameras "
            f"{html.escape(', '.join(data.spec.cameras))}. Bird's-eye panels: forward up, "
            f"right to the right, in metres from the vehicle origin. "
            f"{counted(len(chosen), 'sample')} shown: {html.escape(RULE)}.</p>")


def view(shards: str | Path, out: str | Path, n: int = 12,
         image_size: tuple[int, int] | None = None, progress: bool | None = None,
         remote: RemoteOptions | None = None) -> Path:
    """Write the HTML report of a pack (a folder, manifest path or URL) to `out`."""
    if n < 1:
        raise ViewError(f"-n {n}: the report needs at least one sample. Fix: pass -n 12")
    probe = CARLAWebData(str(shards), batch_size=1, mode="eval", rank=0, world_size=1,
                         remote=remote)
    fields = scene_fields(probe.manifest.spec)
    data = CARLAWebData(str(shards), batch_size=1, mode="eval", rank=0, world_size=1,
                        remote=remote, fields=fields,
                        image_size=image_size or default_size(probe))
    manifest = data.manifest
    show_bar = sys.stderr.isatty() if progress is None else progress
    log.info("view: reading the labels of %s in %s of %s", counted(manifest.total_samples,
             "sample"), counted(len(manifest.shards), "shard"), manifest.where)
    with progress_bar(total=manifest.total_samples, desc="labels", unit="sample",
              disable=not show_bar) as bar:
        rows = scan(manifest, remote, bar)
    if not rows:
        raise ViewError(f"{manifest.where}: the pack holds no sample. Fix: re-pack it")
    chosen = choose(rows, n)
    raws = read_samples(manifest, [r.key for r in chosen], {r.shard for r in chosen}, remote)
    log.info("view: drawing %s (fields %s)", counted(len(raws), "sample"), fields or "none")
    batch = decode(data, raws)
    frames = dict(data.spec.frames)
    cards, bevs, at = [], {}, {k: i for i, k in enumerate(batch.keys)}
    for row in progress_bar(chosen, desc="samples", disable=not show_bar):
        i = at.get(row.key)
        if i is None or not bool(batch.valid[i]):
            log.warning("view: %s not drawn: %s", row.key, "; ".join(batch.errors)[:300])
            continue
        bev = bev_of(batch, i, frames)
        bevs[row.key] = {"waypoints": np.round(bev["waypoints"], 3).tolist(),
                         "target": np.round(bev["target"], 3).tolist()}
        cards.append(_card(row, cameras_of(batch, i, frames), data.spec.cameras, bev))
    hist = counts(rows, list(manifest.doc.get("skipped", [])))
    doc = {"counts": hist, "samples": [r.key for r in chosen], "bev": bevs,
           "fields": fields, "rule": RULE}
    page = render(f"carla-wds view: {manifest.where}", _head(data, rows, chosen), cards,
                  _charts(hist, np.asarray([r.speed for r in rows])), doc)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_bytes(out, page.encode("utf-8"))
