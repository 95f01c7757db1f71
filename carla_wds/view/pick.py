"""`carla-wds show`'s samples, chosen as the report chooses its own: spread over routes,
commands and speed bins (scan.py's choose), decoded as the loader decodes them (samples.py).
Here in view, above train: train/show.py takes this as its `pick`, from the CLI."""
from __future__ import annotations

import logging

from ..load import CARLABatch, CARLAWebData
from ..train.show import ShowError
from .samples import decode
from .scan import choose, read_samples, scan

log = logging.getLogger(__name__)


def spread_batch(data: CARLAWebData, n: int) -> CARLABatch:
    """n samples of data's pack as `view` picks them, the same pack giving the same samples.
    A model with data.history needs each sample's earlier frames, which only the loader's own
    pass assembles: there, its first n samples in eval order."""
    if data.history:
        log.info("show: the checkpoint's model takes data.history=%d earlier frames, so the "
                 "montage shows the first %d samples in eval order, not a spread over routes",
                 data.history, n)
        return next(iter(data))
    chosen = choose(scan(data.manifest, data.remote), n)
    raws = read_samples(data.manifest, [r.key for r in chosen], {r.shard for r in chosen},
                        data.remote)
    urls, shard_of = data.manifest.shard_urls(), {r.key: r.shard for r in chosen}
    for raw in raws:   # the loader's errors name the shard as its own reader would
        raw.setdefault("__shard__", urls[shard_of[raw["__key__"]]])
    batch = decode(data, raws)   # a bad sample comes back as padding, with its error
    if batch.errors and data.on_error == "raise":
        raise ShowError(f"{batch.errors[0]}. Fix: run `carla-wds verify --deep {data.where}` "
                        "and re-pack the route it names")
    return batch
