# CARLAWebData's docstring (dataset.py sets the class's __doc__ to this module's), kept apart
# so the loader module stays within the size rule. help(CARLAWebData) and the site's API page
# (mkdocstrings, Google style) both read it: one source for the argument docs.
"""Decoded, optionally augmented, exactly counted batches of a pack, on one process or DDP.

Iterating it yields `CARLABatch` objects (with `adapter=`, that codebase's dicts). In train
mode each rank gets exactly `len(data)` full batches per epoch; in eval mode every sample is
served exactly once across ranks, the last batches padded with `valid=False` rows. Call
`set_epoch(epoch)` before each epoch; `state_dict()` / `load_state_dict()` resume mid-epoch,
on another number of ranks too. Every argument after `source` is a keyword.

Args:
    source: a pack folder, its `manifest.json`, an `http(s)://` or `s3://` URL of one, or a
        `pipe:` command. None only with `mix=`.
    batch_size: samples per batch on each rank.
    mode: "train": shuffled, exactly `len(data)` full batches per rank; "eval": every sample
        exactly once across ranks, padded with `valid=False` rows.
    num_workers: worker processes decoding batches (0: in this process).
    seed: the shard order, shuffle and augmentation follow (seed, epoch).
    image_size: (H, W) of the cameras in the batch; default: the pack's.
    overlays: overlay packs of this pack (`carla-wds pack-overlay`): each one's entries come in
        `batch.fields[<kind>]`, one parsed JSON value or None per sample, read in step with
        the base.
    cameras: which of the pack's cameras to serve, in this order; default: all.
    augment: the dataset's image augmentation (train mode).
    per_camera_augment: an independent augmentation draw per camera, or one shared by all.
    shuffle_buffer: samples (still encoded) held in the shuffle buffer.
    cache_dir: keep downloaded shards here, checked against the manifest's sha256.
    on_error: "raise", or "skip": a bad sample becomes a `valid=False` row, counted in
        `data.stats` and named in `batch.errors`.
    rank: this process's rank; default: from `torch.distributed`.
    world_size: the number of ranks; default: from `torch.distributed`.
    batches_per_epoch: sample with replacement, this many batches per rank per epoch.
    verify: check each shard's sha256 while reading it.
    pin_memory: put batches in pinned host memory, for faster copies to the GPU.
    prefetch_factor: batches each worker prepares ahead.
    persistent_workers: keep the workers from one pass to the next.
    shard_urls: your own location for each shard (any scheme), one per shard in manifest order.
    remote: `RemoteOptions(connect_timeout, read_timeout, retries, backoff)` for HTTP and S3.
    fields: extra members to decode, e.g. "depth", "semantic", "bev", "lidar", "boxes",
        "measurements", "ego2world": whatever the manifest's `spec.extras` lists
        (`carla-wds inspect` shows them). Default: none.
    lidar_histogram: "garage" or "transfuser2022": serve LiDAR as that project's BEV histogram.
    exact_resize: decode JPEGs fully instead of at a reduced DCT scale before resizing.
    storage_options: fsspec's options for `s3://` (key, secret, endpoint_url, ...).
    cache_limit_bytes: evict the least recently used cached shards to stay under this size.
    limits: raise some decode limits for this loader (a `Limits`, or a dict of its fields).
    overlay_required: serve only the samples with an entry in every overlay; `len()` stays
        exact.
    adapters: {load adapter: option}, e.g. TCP's brake override; default: the manifest's.
        Their older keywords (`brake_override=`, `twin_p=`) are accepted too.
    adapter: a model-ready adapter ("tcp", "garage", "transfuser2022", "b2d_tcp"): batches
        are that codebase's dicts. It sets cameras, image_size (else (256, 512)), fields and
        lidar_histogram.
    sample_transform: your function `fn(sample, rng) -> sample` on each `CARLASample`, run in
        the workers before collation.
    history: K earlier frames of the same route per sample: every per-frame value gets a
        time axis (B, K + 1, ...), oldest first.
    history_stride: samples between those frames, or seconds such as "1s".
    mix: train on a mix of packs instead of one `source`: a mix spec (entries with a source
        and a weight, optionally over buckets).
"""
