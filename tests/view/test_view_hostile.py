"""`carla-wds view` on shards whose strings and labels come from elsewhere (issue 38 low 3, 9):
a route name holding `<!--<script>` and a mathtext `$...$`, and a target_command one-hot of
another width. The report is written, every name stays text (no `<` inside the embedded JSON,
matplotlib never parses `$`), and the odd command gets a label of its own. Real tar shards,
edited with matching sha256; the view runs in process."""
from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from carla_wds.view import view
from carla_wds.view.page import embed_json

from ..shardedit import rewrite_member

# scenario names (the part of a clip name before _TownNN) that broke a consumer: mathtext
# with an unknown command (matplotlib aborted the report), and an HTML comment opener plus a
# script start tag (the embedded JSON's element then ran on past its end tag)
NAMES = {"mathtext": "Bad$\\undefinedcommand{x}$", "script": "Bad<!--<script>&"}


def _script_json(page: Path) -> str:
    text = page.read_text()
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                      text, re.S)
    # two end tags: the JSON's and the zoom script's (a name breaking out would add one)
    assert found and text.count("</script>") == 2
    return found.group(1)


def _episode(route: str):
    def edit(data: bytes) -> bytes:
        meta = json.loads(data)
        meta["episode"] = route
        return json.dumps(meta).encode()
    return edit


@pytest.mark.parametrize("kind", list(NAMES))
def test_names_from_the_shards_stay_text(packs, copy_tree, tmp_path, kind):
    shards = copy_tree(packs["tcp"], "hostile")
    name = NAMES[kind]
    key = rewrite_member(shards, ".meta.json", _episode(f"{name}_Town01_Route0"))
    page = view(shards, tmp_path / "r.html", n=40, progress=False)   # n: every sample drawn
    embedded = _script_json(page)
    assert not set("<>&") & set(embedded), embedded[:200]   # escaped, as \u003c etc.
    doc = json.loads(embedded)
    assert doc["counts"]["scenarios"].get(name) == 1 and key in doc["samples"]
    assert html.escape(name) in page.read_text()   # the card's data-route, as text


def test_embedded_json_escapes_what_a_script_element_must_not_hold():
    doc = {"a": "</script><!--<script>&\u2028\u2029"}
    text = embed_json(doc)
    assert not set("<>&\u2028\u2029") & set(text) and json.loads(text) == doc


def _ten_way(index: int):
    def edit(data: bytes) -> bytes:
        onehot = np.zeros(10, np.float32)
        onehot[index] = 1
        buf = io.BytesIO()
        np.save(buf, onehot)
        return buf.getvalue()
    return edit


def test_a_one_hot_of_another_width_gets_a_label(packs, copy_tree, tmp_path):
    shards = copy_tree(packs["tcp"], "tenway")
    rewrite_member(shards, ".target_command.npy", _ten_way(9))
    doc = json.loads(_script_json(view(shards, tmp_path / "r.html", n=40, progress=False)))
    assert doc["counts"]["commands"]["unknown command (one-hot index 9)"] == 1, doc["counts"]
