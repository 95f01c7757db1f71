"""The typed manifest: what read_manifest gives the tools, from a real pack."""
from __future__ import annotations

import hashlib
import json

from carla_wds import CARLAWebData
from carla_wds.manifest import Manifest, ShardEntry, read_manifest

from .helpers import SIZE


def test_read_manifest_gives_typed_fields_and_the_document(packed_tf4):
    doc = json.loads((packed_tf4 / "manifest.json").read_text())
    m = read_manifest(packed_tf4)
    assert isinstance(m, Manifest) and m.doc == doc
    assert m.where == str(packed_tf4 / "manifest.json")
    assert m.shards == tuple(ShardEntry(s["name"], s["samples"], s["bytes"], s["sha256"])
                             for s in doc["shards"])
    assert m.total_samples == sum(s.samples for s in m.shards) == doc["total_samples"]
    assert m.spec.cameras == tuple(doc["cameras"]) and m.spec.pred_len == doc["pred_len"]
    assert dict(m.spec.codecs) == doc["members"]
    assert m.sizes_of(("front", "left")) == (tuple(doc["image_sizes"]["front"]),
                                            tuple(doc["image_sizes"]["left"]))
    assert m.shard_urls() == tuple(str(packed_tf4 / s["name"]) for s in doc["shards"])


def test_resume_identity_is_that_of_earlier_versions(packed_tcp):
    """A state saved by an earlier version names the manifest by this hash of its shard list;
    the typed manifest must keep it, or every old checkpoint would refuse to resume."""
    doc = json.loads((packed_tcp / "manifest.json").read_text())
    expected = hashlib.sha256(json.dumps(doc["shards"], sort_keys=True).encode()).hexdigest()
    data = CARLAWebData(str(packed_tcp), batch_size=2, image_size=SIZE)
    assert data.state_dict()["manifest"] == expected
