"""Shards written by the packer before the declarative spec (schema version 1) still load.

The fixture was written by that packer and is never regenerated (tests/fixtures/README.md)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from carla_wds.load import CARLAWebData
from carla_wds.manifest import read_manifest

FIXTURE = Path(__file__).parent / "fixtures" / "v1_tcp"
EXPECTED = json.loads((FIXTURE.parent / "v1_tcp_expected.json").read_text())


def test_v1_manifest_is_version_1():
    manifest = read_manifest(FIXTURE)
    assert manifest.doc["schema_version"] == 1
    assert manifest.total_samples == len(EXPECTED) == 8


def test_v1_shards_decode_to_what_the_old_loader_gave():
    ds = CARLAWebData(str(FIXTURE), batch_size=2, image_size=(32, 64), mode="eval")
    seen = {}
    for batch in ds:
        for i, key in enumerate(batch.keys):
            if batch.valid[i]:
                seen[key] = (batch, i)
    assert sorted(seen) == sorted(EXPECTED)
    for key, (batch, i) in seen.items():
        want = EXPECTED[key]
        np.testing.assert_array_equal(batch.waypoints[i].numpy(),
                                      np.array(want["waypoints"], np.float32))
        np.testing.assert_array_equal(batch.target_point[i].numpy(),
                                      np.array(want["target_point"], np.float32))
        np.testing.assert_array_equal(batch.command[i].numpy(), np.array(want["command"]))
        assert float(batch.speed[i]) == want["speed"]
        images = batch.images[i].contiguous().numpy().tobytes()
        assert hashlib.sha256(images).hexdigest() == want["images_sha256"]
