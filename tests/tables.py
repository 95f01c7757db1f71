"""A fixture helper: the registries (codecs, modalities, datasets) as they were before a test
that registers a toy kind or dataset, restored after it."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from carla_wds.codecs import CODECS
from carla_wds.datasets import DATASETS, LIDAR_PRESETS
from carla_wds.modalities import MODALITIES


@contextmanager
def restored_tables() -> Iterator[None]:
    saved = [(t, dict(t)) for t in (CODECS, MODALITIES, DATASETS, LIDAR_PRESETS)]
    try:
        yield
    finally:
        for table, before in saved:
            table.clear()
            table.update(before)
