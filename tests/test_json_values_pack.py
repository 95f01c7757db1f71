"""json_values (issue 38, N4) end to end: a garage route whose measurements `.json.gz` is a
small bomb (the probe's was 254 kB and reached 6.56 GB), a pack-overlay entry, and an overlay
pack's manifest and members in the loader. Each is refused in one line naming the file, or is
a counted skip, while the same readers take the real data under the same limit."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from carla_wds import limits
from carla_wds.codecbase import json_values
from carla_wds.load import CARLAWebData
from carla_wds.pack.errors import PackError
from carla_wds.pack.overlay import pack_overlay
from tests.conftest import make_raw
from tests.conftest import run_pack_all_frames as run_pack
from tests.helpers import rewrite_shard
from tests.overlaykit import garage_with_trees

KIND = "simlingo_commentary"
SIZE = (16, 24)


def bomb(dicts: int, **fields) -> bytes:
    """A JSON object of `fields` and a list of `dicts` empty dicts: 3 bytes of text each."""
    head = json.dumps(fields)[:-1] + (', ' if fields else '')
    return (head + '"x": [' + "{}," * dicts + "{}]}").encode()


def test_a_measurements_bomb_is_one_line_or_a_counted_skip(tmp_path):
    """The default json_values (4,000,000): 2.1M dicts in a 6 kB .json.gz."""
    raw = make_raw(tmp_path / "raw", "garage", episodes=1, frames=12)
    victim = sorted(raw.glob("**/measurements/*.json.gz"))[1]   # frame 0001
    victim.write_bytes(gzip.compress(bomb(2_100_000), 9))
    assert victim.stat().st_size < 64 << 10
    with pytest.raises(PackError) as exc:
        run_pack(raw, tmp_path / "fail", layout="garage", pred_len=4)
    line = str(exc.value)
    assert "\n" not in line and f"measurements/{victim.name}" in line
    assert "json_values=4,000,000" in line and "--limit json_values=N" in line
    manifest = run_pack(raw, tmp_path / "skip", layout="garage", pred_len=4, on_error="skip")
    # frame 1, and frame 0 whose future reads frame 1's measurements
    assert [(s["frame"], s["file"]) for s in manifest["skipped"]] == [
        (0, f"measurements/{victim.name}"), (1, f"measurements/{victim.name}")]
    assert all("json_values" in s["reason"] for s in manifest["skipped"])


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("json_values_ovl")
    garage_with_trees(root, {KIND: "tree"}, 1, 5, coverage=0.8)
    pack_overlay(root / "tree", root / "shards", root / "ovl", KIND)
    return root


def _limit(packs: Path) -> int:
    """Twice the values of the largest real document here: those pass, a bomb of 2x fails."""
    docs = [packs / "shards" / "manifest.json", packs / "ovl" / "manifest.json"]
    docs += sorted((packs / "tree").rglob("*.json.gz"))
    return 2 * max(json_values(gzip.decompress(p.read_bytes()) if p.suffix == ".gz"
                               else p.read_bytes()) for p in docs)


def test_a_pack_overlay_entry_bomb_names_the_file(packs, tmp_path):
    n = _limit(packs)
    tree = tmp_path / "tree"
    shutil.copytree(packs / "tree", tree)
    with limits.using(limits.DEFAULT.with_overrides({"json_values": n})):
        assert pack_overlay(tree, packs / "shards", tmp_path / "ok", KIND).entries
        victim = sorted(tree.rglob("*.json.gz"))[0]
        victim.write_bytes(gzip.compress(bomb(n, commentary="slow down")))
        with pytest.raises(PackError, match=rf"overlay file .*{victim.name}: .*the values a "
                                            rf"JSON document .*json_values={n:,}") as info:
            pack_overlay(tree, packs / "shards", tmp_path / "o", KIND)
    assert "\n" not in str(info.value) and not (tmp_path / "o").exists()


def test_an_overlay_manifest_bomb_in_the_loader_is_one_line(packs, tmp_path):
    n = _limit(packs)
    kw = dict(batch_size=2, image_size=SIZE, mode="eval", limits={"json_values": n})
    copy = tmp_path / "ovl"
    shutil.copytree(packs / "ovl", copy)
    assert len(list(CARLAWebData(str(packs / "shards"), overlays=[str(copy)], **kw)))
    doc = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**doc, "x": [{}] * n}))
    # CARLAWebData(limits=) holds its overlay manifests too, not only the process's limits
    with pytest.raises(ValueError, match=r"overlay manifest .*manifest.json: not valid JSON "
                                         rf"\(the values .*json_values={n:,}") as info:
        CARLAWebData(str(packs / "shards"), overlays=[str(copy)], **kw)
    assert "\n" not in str(info.value)


def test_an_overlay_member_bomb_in_the_loader_is_one_line_or_a_skip(packs, tmp_path):
    n = _limit(packs)
    kw = dict(batch_size=2, image_size=SIZE, mode="eval", limits={"json_values": n})
    copy = tmp_path / "ovl"
    shutil.copytree(packs / "ovl", copy)
    first = sorted(copy.glob("overlay-*.tar"))[0]
    member = f"{KIND}.json"
    rewrite_shard(first, lambda i, s: {**s, member: bomb(n)} if i == 1 else s)
    with pytest.raises(ValueError, match=rf"{member} \(the values .*json_values={n:,}"):
        list(CARLAWebData(str(packs / "shards"), overlays=[str(copy)], **kw))
    skip = CARLAWebData(str(packs / "shards"), overlays=[str(copy)], on_error="skip", **kw)
    assert sum(len(b.errors) for b in skip) == 1
