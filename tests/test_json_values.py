"""One bounded JSON reader (issue 38, N4 and the plan.json half of Low 2): `{},` is 3 bytes of
text and a 64-byte dict, so json_bytes alone let 256 MiB of text become GBs of objects. Every
JSON a file supplies goes through codecbase.json_loads, which counts from the text, before
parsing, an upper bound of the values it can parse to and refuses one over json_values.

Per reader: a tiny `[{},{},...]` over a lowered json_values is refused naming the file, while
the same reader accepts its normal data under the same limit. The bombs stay small: the limit
is lowered, and tracemalloc shows that a refusal builds none of the dicts.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from carla_wds import limits
from carla_wds.codecbase import json_loads, json_values
from carla_wds.codecs import CODECS
from carla_wds.limits import LimitError
from carla_wds.manifest import read_manifest
from carla_wds.manifest_schema import ManifestError
from carla_wds.pack.cluster import part_states
from carla_wds.pack.errors import PackError
from carla_wds.pack.journal import read_journal, write_header
from carla_wds.pack.plan_parts import FORMAT, part_dir, read_plan, write_plan
from carla_wds.pack.shards import JOURNAL
from carla_wds.pack.sources import decode_json, read_json
from tests.test_bounds_decoders import peak_of

LIMIT = 1000
BOMB = b"[" + b"{}," * 300_000 + b"{}]"   # 900 kB of text: 300k dicts, ~20 MB once parsed


def lowered(n: int = LIMIT):
    return limits.using(limits.DEFAULT.with_overrides({"json_values": n}))


def _values(x) -> int:
    """The Python objects json builds for a value: every dict, list, key, string, number."""
    if isinstance(x, dict):
        return 1 + sum(1 + _values(v) for v in x.values())
    if isinstance(x, list):
        return 1 + sum(_values(v) for v in x)
    return 1


def _random_doc(rng: random.Random, depth: int = 0):
    pick = rng.randrange(8 if depth < 5 else 4)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.uniform(-1e6, 1e6) if rng.random() < 0.5 else rng.randrange(-99, 99)
    if pick in (2, 3):   # strings full of what the bound counts
        return "".join(rng.choice('[]{},:"\\ a\u00e9') for _ in range(rng.randrange(6)))
    if pick in (4, 5):
        return [_random_doc(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {str(_random_doc(rng, 9)): _random_doc(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_the_bound_holds_for_any_document_and_strings_do_not_count():
    """json_values never counts fewer values than json builds (spaced or compact), and
    json_loads counts outside strings only: a string full of commas is one value."""
    rng = random.Random(38)
    for _ in range(3000):
        doc = _random_doc(rng)
        for text in (json.dumps(doc), json.dumps(doc, separators=(",", ":"), indent=1)):
            assert json_values(text.encode()) >= _values(json.loads(text)), text
    with lowered(3):
        assert json_loads(b'["' + b",:[{" * 5000 + b'", 1]') == [",:[{" * 5000, 1]
        with pytest.raises(LimitError, match="json_values"):
            json_loads(b"[1, 2, 3]")   # 4 values


def test_a_json_bomb_is_refused_before_it_is_built():
    """The shared reader: refused from the text (tracemalloc: none of the 300k dicts), one
    line naming the file and the limit; the codec of shard members and pack's raw reader
    refuse it too."""
    err, peak = peak_of(lambda: json_loads(BOMB))   # the default limit: 300k values pass
    assert err is None and peak > 16 << 20
    with lowered():
        err, peak = peak_of(lambda: json_loads(BOMB, "route/measurements/0001.json"))
        assert isinstance(err, LimitError) and err.name == "json_values"
        assert peak < 6 << 20
        line = str(err)
        assert line.startswith("route/measurements/0001.json: the values a JSON document")
        assert "600,003" in line and "--limit json_values=N" in line and "\n" not in line
        assert "json_values=1,000" in CODECS["json"].check(BOMB)
        assert CODECS["json"].check(json.dumps({"a": list(range(900))}).encode()) is None
        with pytest.raises(LimitError, match="json_values"):
            decode_json(gzip.compress(BOMB), gz=True)
        assert decode_json(gzip.compress(b'{"speed": [1, 2]}'), gz=True) == {"speed": [1, 2]}


def test_pack_raw_json_names_the_file(tmp_path):
    bomb, good = tmp_path / "0001.json.gz", tmp_path / "0002.json"
    bomb.write_bytes(gzip.compress(BOMB))
    good.write_text(json.dumps({"x": 1.0, "y": [0, 1]}))
    with lowered():
        with pytest.raises(LimitError, match=rf"^{bomb}: the values .* json_values=1,000"):
            read_json(bomb)
        assert read_json(good) == {"x": 1.0, "y": [0, 1]}


@pytest.fixture(scope="module")
def tcp_pack(zoo) -> Path:
    return zoo(episodes=1, frames=16, max_samples=50)   # shared, read-only (conftest.zoo)


def test_a_manifest_bomb_is_one_line(tcp_pack, tmp_path):
    doc = json.loads((tcp_pack / "manifest.json").read_text())
    with lowered(20 * json_values(json.dumps(doc).encode())):   # a real one passes
        assert read_manifest(tcp_pack).where
        (tmp_path / "manifest.json").write_text(json.dumps({**doc, "x": [{}] * 100_000}))
        with pytest.raises(ManifestError, match=r"manifest.json: manifest is not valid JSON "
                                                r"\(the values .* json_values"):
            read_manifest(tmp_path)


def _plan(out: Path, extra=None) -> Path:
    write_plan(str(out), {"format": FORMAT, "parts": 1, "part_list": [{"part": 0}],
                          **({"x": extra} if extra is not None else {})})
    return out / "plan.json"


def test_plan_json_is_bounded(tmp_path):
    """plan.json: a bomb, and (Low 2) a document nested 100k deep, are one PackError naming
    the file, never a RecursionError."""
    _plan(tmp_path / "a")
    with lowered():
        assert read_plan(str(tmp_path / "a"))["parts"] == 1
        path = _plan(tmp_path / "b", [{}] * 5000)
        with pytest.raises(PackError, match=rf"^{path} is not a plan .*json_values=1,000"):
            read_plan(str(tmp_path / "b"))
    path.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(PackError, match=rf"^{path} is not a plan .*json_depth=100") as info:
        read_plan(str(path))
    assert "\n" not in str(info.value)


def test_a_journal_bomb_names_the_journal(tmp_path):
    identity = {"layout": "tcp", "max_samples": 5}
    write_header(tmp_path, identity)
    with lowered():
        assert read_journal(tmp_path, identity, "shard") == []
        (tmp_path / JOURNAL).write_bytes(BOMB + b"\n")
        with pytest.raises(LimitError, match=rf"^{tmp_path / JOURNAL}: the values"):
            read_journal(tmp_path, identity, "shard")


def test_a_failure_marker_bomb_is_not_parsed(tmp_path):
    """pack-status: a part's failure marker over json_values reads as its path, unparsed."""
    _plan(tmp_path)
    marker = tmp_path / f"{part_dir(0, 1)}.failed"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"error": "disk full"}))
    with lowered():
        assert part_states(str(tmp_path))[0] == ("failed", "disk full")
        marker.write_bytes(b'{"error": ' + BOMB + b"}")
        err, peak = peak_of(lambda: part_states(str(tmp_path)))
        assert err is None and peak < 6 << 20
        assert part_states(str(tmp_path))[0] == ("failed", str(marker))
