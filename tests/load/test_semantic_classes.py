"""`semantics` is served as the project's training classes, through the table the layout
declares and the manifest carries; `semantics_raw` holds the CARLA ids as saved (issue 24).

Both loaders index their converter with the saved ids: carla_garage@1448bed team_code/data.py
l.43 `self.converter = np.uint8(config.converter)`, l.503 `self.converter[loaded_semantics[...]]`;
transfuser@22b3ccd team_code_transfuser/data.py l.36 and l.235. The tables below are written
here from the projects' config.py (cited per table), not read from carla_wds. One frame of each
raw tree is overwritten with every id the table maps, so every entry is checked.
"""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.codecs import SchemaError
from carla_wds.load.dataset import CARLAWebData
from carla_wds.pack.synth import synth_dataset
from tests.conftest import run_pack

# carla_garage@1448bed team_code/config.py l.394-417: CARLA 0.9.10's 23 ids -> 7 classes
# (0 unlabeled, 1 vehicle, 2 road, 3 light, 4 pedestrian, 5 road line, 6 sidewalk)
GARAGE = {4: 4, 6: 5, 7: 2, 8: 6, 10: 1, 18: 3}                 # every other id of 0..22: 0
GARAGE_IDS = 23
# transfuser@22b3ccd team_code_transfuser/config.py l.88-117: 28 ids (its CARLA build adds
# 23 red light, 24 yellow light, 25 green light, 26 stop sign, 27 stop line marking)
TF2022 = {4: 4, 6: 5, 7: 2, 8: 6, 10: 1, 23: 3, 24: 3, 27: 5}  # every other id of 0..27: 0
TF2022_IDS = 28


def converted(table: dict[int, int], ids: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda i: table.get(int(i), 0), otypes=[np.uint8])(ids)


def every_id(path: Path, n: int) -> None:
    """Overwrite a semantics PNG with ids 0..n-1 repeated over its own size."""
    h, w = cv2.imread(str(path), cv2.IMREAD_UNCHANGED).shape[:2]
    ids = (np.arange(h * w) % n).reshape(h, w).astype(np.uint8)
    assert cv2.imwrite(str(path), ids)


def _tree(tmp: Path, layout: str, frames: int, size: tuple[int, int]) -> Path:
    synth_dataset(tmp, layout, episodes=1, frames=frames, seed=2, image_size=size,
                  progress=False)
    for folder in ("semantics", "semantics_augmented"):
        for path in tmp.rglob(f"{folder}/*.png"):
            if path.stem in ("0002", "0011", "0012"):
                every_id(path, GARAGE_IDS if layout == "garage" else TF2022_IDS)
    return tmp


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """layout -> (raw tree, packed shards)."""
    out = {}
    for layout, frames, size, kw in (("garage", 22, (48, 64), {}),
                                     ("transfuser2022", 12, (32, 96),
                                      {"allow_pickle_input": True})):
        raw = _tree(tmp_path_factory.mktemp(f"raw_{layout}"), layout, frames, size)
        shards = tmp_path_factory.mktemp(f"packed_{layout}") / "shards"
        run_pack(raw, shards, layout=layout, **kw)
        out[layout] = raw, shards
    return out


def _saved_ids(raw: Path, key: str) -> np.ndarray:
    (path,) = raw.rglob(f"semantics/{key.rpartition('_')[2]}.png")
    return cv2.imread(str(path), cv2.IMREAD_UNCHANGED)


def _samples(shards: Path, fields: list[str]) -> list[tuple[str, object, int]]:
    manifest = json.loads((shards / "manifest.json").read_text())
    (h, w) = next(iter(manifest["image_sizes"].values()))
    out = []
    for b in CARLAWebData(str(shards), batch_size=2, mode="eval", image_size=(h, w),
                          fields=fields):
        out += [(k, b, i) for i, k in enumerate(b.keys) if b.valid[i]]
    return out


@pytest.mark.parametrize("layout,table,n", [("garage", GARAGE, GARAGE_IDS),
                                            ("transfuser2022", TF2022, TF2022_IDS)])
def test_semantics_are_the_projects_classes_and_semantics_raw_the_saved_ids(packs, layout,
                                                                             table, n):
    raw, shards = packs[layout]
    (sem,) = [e for e in json.loads((shards / "manifest.json").read_text())["spec"]["extras"]
              if e["name"] == "semantics"]
    assert sem["classes"] == [table.get(i, 0) for i in range(n)]
    rows = _samples(shards, ["semantics", "semantics_raw"])
    full = 0
    for key, b, i in rows:
        ids = _saved_ids(raw, key)
        full += len(np.unique(ids)) == n
        np.testing.assert_array_equal(b.semantics[i, 0].numpy(), converted(table, ids), key)
        np.testing.assert_array_equal(b.extras["semantics_raw"][i, 0].numpy(), ids, key)
    assert rows and full, "a sample should hold every id of the table"
    only = _samples(shards, ["semantics"])
    assert all(b.extras is None or "semantics_raw" not in b.extras for _, b, _ in only)
    raw_only = _samples(shards, ["semantics_raw"])
    assert all(b.semantics is None for _, b, _ in raw_only)
    for key, b, i in raw_only:
        np.testing.assert_array_equal(b.extras["semantics_raw"][i, 0].numpy(),
                                      _saved_ids(raw, key))


def test_an_id_past_the_table_is_refused_naming_the_sample(packs, tmp_path):
    """garage's loader would stop with an IndexError; the loader names the sample and the
    way to read the ids as saved."""
    raw, _ = packs["garage"]
    for path in raw.rglob("semantics/0012.png"):
        ids = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        ids[0, 0] = GARAGE_IDS + 7
        assert cv2.imwrite(str(path), ids)
    shards = tmp_path / "shards"
    run_pack(raw, shards, layout="garage")
    with pytest.raises(SchemaError, match=r"__0012.*class id 30.*ids 0\.\.22.*semantics_raw"):
        _samples(shards, ["semantics"])
    assert len(_samples(shards, ["semantics_raw"])) == len(_samples(shards, ["depth"]))


@pytest.mark.parametrize("shape", [(160, 960), (1, 7, 5), (3, 1), (0, 4), (9,)])
def test_the_class_lookup_is_the_table_indexed_by_the_ids(shape):
    """classes.lookup (cv2.LUT for uint8 ids) equals numpy's table[ids] on every id value, for
    2-D, 3-D, 1-D, empty and strided ids, and wider id types."""
    from carla_wds.load.decode.classes import lookup
    rng = np.random.default_rng(len(shape))
    table = rng.integers(0, 256, 256, dtype=np.uint8)
    ids = rng.integers(0, 256, shape, dtype=np.uint8)
    ids.reshape(-1)[:min(ids.size, 256)] = np.arange(256, dtype=np.uint8)[:ids.size]
    for given in (ids, ids[..., ::-1], ids.astype(np.int64)):
        got = lookup(table, given)
        assert got.dtype == np.uint8 and got.shape == given.shape
        np.testing.assert_array_equal(got, table[given])
