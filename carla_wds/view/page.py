"""`carla-wds view SHARDS --out report.html`: one static HTML file a browser opens with no
server and no network: every picture inlined as a data: URI, the counts also as JSON in the
page (a script element of type application/json, for tools and tests). Written atomically."""
from __future__ import annotations

import base64
import html
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..fileio import atomic_write_bytes
from ..load import CARLAWebData, Storage
from ..progress import bar as progress_bar   # a terminal's bar, or a few log lines
from ..remote import RemoteOptions
from ..words import counted
from ..train.frames import label_frames, to_right_forward
from .draw import bars_png, bev_half, bev_png, controls_png, ends_png, speed_png
from .samples import bev_of, cameras_of, decode, scene_fields
from .scan import Row, ViewError, choose, command_name, counts, read_samples, scan

log = logging.getLogger(__name__)
DEFAULT_HEIGHT = 160   # camera height in the report (px), unless the pack's is smaller
RULE = ("strata of (route, command, speed bin); next the sample of the stratum whose "
        "route, command and speed bin were drawn least so far; ties and the sample within a "
        "stratum by the smallest sha256 of the key: deterministic")
_CSS = """body{font:14px sans-serif;margin:16px;background:#fafafa;color:#222}
.grid{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.row{display:flex;flex-wrap:wrap;gap:6px;align-items:flex-start}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px}
.card h3{font-size:12px;margin:0 0 6px;word-break:break-all}
.cams{display:flex;flex-wrap:wrap;gap:4px;align-items:flex-start}.cams figure{margin:0}
.rig{display:grid;grid-template-columns:repeat(3,auto);gap:4px;justify-content:start}
figcaption{font-size:11px;color:#555}.bev{margin:0;flex:none}.zoomable{cursor:zoom-in}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}code{font-size:12px}
#zoom{position:fixed;inset:0;background:rgba(0,0,0,.85);display:flex;flex-direction:column;
align-items:center;justify-content:center;cursor:zoom-out;z-index:10;color:#eee}
#zoom[hidden]{display:none}#zoom img{width:94vw;height:86vh;object-fit:contain}"""
# click a picture: the overlay shows it as large as the window allows; a click or Esc closes
_JS = """const z=document.getElementById('zoom');
document.addEventListener('click',e=>{const t=e.target;
if(t.classList&&t.classList.contains('zoomable')){z.querySelector('img').src=t.src;
z.querySelector('p').textContent=t.alt;z.hidden=false}else if(z.contains(t)){z.hidden=true}});
document.addEventListener('keydown',e=>{if(e.key==='Escape')z.hidden=true});"""
_ZOOM = '<div id="zoom" hidden><img alt="zoomed picture"><p></p></div>'
# where a camera sits in the surround grid, from words in its name (any layout's rig)
_BACK, _LEFT, _RIGHT = re.compile(r"back|rear", re.I), re.compile("left", re.I), \
    re.compile("right", re.I)


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


def rig_places(names: tuple[str, ...]) -> list[tuple[int, int]] | None:
    """Each camera's (row, column) in a surround grid, read from its name: 'back' or 'rear'
    on the second row, 'left' and 'right' in the outer columns (front-left, front,
    front-right / back-left, back, back-right). None for one camera, or where two names give
    one place (names that say no direction): those are shown in the pack's order."""
    places = [(2 if _BACK.search(n) else 1,
               1 if _LEFT.search(n) else 3 if _RIGHT.search(n) else 2) for n in names]
    return places if len(names) > 1 and len(set(places)) == len(places) else None


def _card(row: Row, cams: list[bytes], names: tuple[str, ...], panel: bytes) -> str:
    command = command_name(row.command)
    title = f"{row.key} · {command} · {row.speed:.1f} m/s"
    places = rig_places(names)
    at = [""] * len(names) if places is None else \
        [f' style="grid-row:{r};grid-column:{c}"' for r, c in places]
    figs = "".join(f"<figure{a}>{_img(c, 'image/jpeg', n, 'zoomable')}<figcaption>"
                   f"{html.escape(n)}</figcaption></figure>" for a, c, n in zip(at, cams, names))
    bev = _img(panel, "image/png", "bird's-eye", "zoomable")
    return (f'<div class="card" data-key="{html.escape(row.key)}" data-route="'
            f'{html.escape(row.route)}" data-command="{html.escape(command)}">'
            f'<h3>{html.escape(title)}</h3><div class="row"><div class="cams'
            f'{"" if places is None else " rig"}">{figs}</div>'
            f'<figure class="bev">{bev}</figure></div></div>')


# the buckets a pack records per sample (manifest["buckets"]["sizes"]), charted in this order
BUCKET_CHARTS = {"accel": "acceleration", "yaw_rate": "yaw rate", "start": "start from a stop",
                 "leading": "leading actor", "crossing": "crossing actor"}


def _whole_pack(rows: list[Row], frames: dict[str, str]) -> list[str]:
    """The scatter of every sample's last waypoint, in (right, forward) metres, and the
    expert controls' histograms where the pack records them."""
    ends = np.asarray([r.end for r in rows], np.float64).reshape(-1, 2)
    ends = ends[np.isfinite(ends).all(axis=1)]
    out = [_img(ends_png(to_right_forward(torch.from_numpy(ends), label_frames(frames)[0])
                         .numpy()), "image/png", "last waypoints")] if len(ends) else []
    controls = np.asarray([r.controls for r in rows if r.controls is not None], np.float64)
    if len(controls):
        out.append(_img(controls_png(controls), "image/png", "expert controls"))
    return out


def _charts(hist: dict[str, dict[str, int]], rows: list[Row], buckets: dict[str, Any],
            frames: dict[str, str]) -> str:
    """The charts; one whose counts hold a single value says so in a line instead (a bar
    chart of one bar shows nothing, as every tcp sample's scenario '-')."""
    bars = [("commands", hist["commands"], "samples"), ("towns", hist["towns"], "samples"),
            ("scenarios (clip or folder name)", hist["scenarios"], "samples")]
    bars += [(f"{title} (manifest buckets)", buckets[name], "samples")
             for name, title in BUCKET_CHARTS.items() if isinstance(buckets.get(name), dict)]
    if hist["box_classes"]:   # a pack with boxes
        bars.append(("boxes by class (all samples, not the ego)", hist["box_classes"], "boxes"))
    bars.append(("skipped frames by reason (manifest)", hist["skipped"], "frames"))
    speeds = np.asarray([r.speed for r in rows])
    out, notes = [_img(speed_png(speeds), "image/png", "speeds")] + _whole_pack(rows, frames), []
    for title, values, unit in bars:
        if len(values) > 1:
            out.append(_img(bars_png(title, values, unit), "image/png", title))
        else:
            notes.append(f"{title}: " + (f"all {counted(next(iter(values.values())), unit[:-1])}"
                                         f" {html.escape(next(iter(values)))}" if values
                                         else "none"))
    note = f'<p class="one">One value (no chart): {"; ".join(notes)}.</p>' if notes else ""
    return f'<div class="charts">{"".join(out)}</div>{note}'


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
            f"<h2>Labels</h2>{charts}"
            f'<h2>Samples</h2><div class="grid">{"".join(cards)}</div>{_ZOOM}'
            f'<script type="application/json" id="report-data">{data}</script>'
            f"<script>{_JS}</script></body></html>")


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
                         storage=Storage(remote=remote))
    fields = scene_fields(probe.manifest.spec)
    data = CARLAWebData(str(shards), batch_size=1, mode="eval", rank=0, world_size=1,
                        storage=Storage(remote=remote), fields=fields,
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
    at = {k: i for i, k in enumerate(batch.keys)}
    drawn = []
    for row in chosen:
        i = at.get(row.key)
        if i is None or not bool(batch.valid[i]):
            log.warning("view: %s not drawn: %s", row.key, "; ".join(batch.errors)[:300])
            continue
        drawn.append((row, i, bev_of(batch, i, frames)))
    # one scale for every panel, so distances compare across samples
    half = bev_half([p for _, _, b in drawn for p in (b["waypoints"], b["target"])])
    cards, bevs = [], {}
    for row, i, bev in progress_bar(drawn, desc="samples", disable=not show_bar):
        panel, legend = bev_png(bev, "bird's-eye (m)", half)
        bevs[row.key] = {"waypoints": np.round(bev["waypoints"], 3).tolist(),
                         "target": np.round(bev["target"], 3).tolist(), "legend": legend}
        cards.append(_card(row, cameras_of(batch, i, frames), data.spec.cameras, panel))
    hist = counts(rows, list(manifest.doc.get("skipped", [])))
    doc = {"counts": hist, "samples": [r.key for r in chosen], "bev": bevs,
           "bev_half_m": half, "fields": fields, "rule": RULE}
    page = render(f"carla-wds view: {manifest.where}", _head(data, rows, chosen), cards,
                  _charts(hist, rows, manifest.doc.get("buckets", {}).get("sizes", {}),
                          frames), doc)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_bytes(out, page.encode("utf-8"))
