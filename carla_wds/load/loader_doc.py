# CARLAWebData's docstring (dataset.py sets the class's __doc__ to this module's), kept apart
# so the loader module stays within the size rule. help(CARLAWebData) and the site's API page
# (mkdocstrings, Google style) both read it: one source for the argument docs.
"""Decoded, optionally augmented, exactly counted batches of a pack, on one process or DDP.

Iterating it yields `CARLABatch` objects (with `adapter=`, that codebase's dicts). In train
mode each rank gets exactly `len(data)` full batches per epoch; in eval mode every sample is
served exactly once across ranks, the last batches padded with `valid=False` rows. Call
`set_epoch(epoch)` before each epoch; `state_dict()` / `load_state_dict()` resume mid-epoch,
on another number of ranks too. Every argument after `source` is a keyword.

The options come as a few keywords, some of them small records (`carla_wds.load`:
`Transport`, `Storage`, `Decode`, `Augment`, `History`, `Overlays`). The flat keywords these
replaced (`persistent_workers=`, `pin_memory=`, `prefetch_factor=`, `remote=`,
`storage_options=`, `cache_dir=`, `cache_limit_bytes=`, `shard_urls=`, `verify=`,
`exact_resize=`, `lidar_histogram=`, `limits=`, `per_camera_augment=`, `history_stride=`,
`overlay_required=`, `adapters=`, `sample_transform=`) still work for one release, each with a
DeprecationWarning naming its new spelling.

Args:
    source: a pack folder, its `manifest.json`, an `http(s)://` or `s3://` URL of one, or a
        `pipe:` command. None only with `mix=`.
    batch_size: samples per batch on each rank.
    mode: "train": shuffled, exactly `len(data)` full batches per rank; "eval": every sample
        exactly once across ranks, padded with `valid=False` rows.
    num_workers: worker processes decoding batches (0: in this process).
    seed: the shard order, shuffle and augmentation follow (seed, epoch).
    image_size: (H, W) of the cameras in the batch, or an "HxW" string such as "256x512";
        default: the pack's recorded size of the first served camera (256x512 for packs
        that recorded none); with `adapter=NAME`, that adapter's own. A size that turns the
        pack's landscape images portrait (or back) warns once.
    cameras: which of the pack's cameras to serve, in this order; default: all.
    fields: extra members to decode, e.g. "depth", "semantic", "bev", "lidar", "boxes",
        "measurements", "ego2world": whatever the manifest's `spec.extras` lists
        (`carla-wds inspect` shows them). Default: none.
    augment: the dataset's image augmentation (train mode): True, or
        `Augment(per_camera=False)` for one draw shared by all cameras (default: a draw per
        camera).
    shuffle_buffer: samples (still encoded) held in the shuffle buffer.
    on_error: "raise", or "skip": a bad sample becomes a `valid=False` row, counted in
        `data.stats` and named in `batch.errors`.
    rank: this process's rank; default: from `torch.distributed`.
    world_size: the number of ranks; default: from `torch.distributed`.
    batches_per_epoch: sample with replacement, this many batches per rank per epoch.
    transport: `Transport(prefetch_factor=2, persistent=False, pin_memory=False)`: batches
        each worker prepares ahead; the workers kept from one pass to the next; batches put
        in pinned host memory, for faster copies to the GPU.
    storage: `Storage(remote, options, cache_dir, cache_limit_bytes, shard_urls, verify)`:
        `RemoteOptions(connect_timeout, read_timeout, retries, backoff)` for HTTP and S3;
        fsspec's options for `s3://` (key, secret, endpoint_url, ...); a folder keeping
        downloaded shards, checked against the manifest's sha256, and the size its least
        recently used shards are evicted to stay under; your own location for each shard (any
        scheme), one per shard in manifest order; each shard's sha256 checked while reading.
    decode: `Decode(exact_resize, lidar_histogram, limits)`: decode JPEGs fully instead of at
        a reduced DCT scale before resizing; "garage" or "transfuser2022" serves LiDAR as that
        project's BEV histogram; raise some decode limits for this loader (a `Limits`, or a
        dict of its fields).
    overlays: overlay packs of this pack (`carla-wds pack-overlay`), a list or
        `Overlays(packs, required=True)`: each one's entries come in
        `batch.fields[<kind>]`, one parsed JSON value or None per sample, read in step with
        the base; `required` serves only the samples with an entry in every overlay (`len()`
        stays exact). With an `adapter`, the dict holds them under `"overlays"`, `{kind: one
        entry per row}`, and your function sees them in `sample["fields"][kind]`. With
        `mix`, list every mixed pack's overlays: each joins the pack its manifest names (a
        pack without some kind serves None for it; `required` needs all and draws among the
        kept samples). `Overlays(map=MAP_PACK)` (`carla-wds pack-map`): each frame gets its
        dataset's map GT in `fields` (Bench2Drive: VAD's `map_pts` (N, 20, 2) float32 in
        VAD's LiDAR frame and `map_labels` (N,) int64; UniAD's `gt_lane_labels`,
        `gt_lane_bboxes`, `gt_lane_masks` (N, 200, 200); lists per row; docs/packing.md), and
        `ego2world` is selected; `Overlays(map=..., map_gt=("vad",))` computes one model's
        alone. A town without a map is refused in one line.
    label_options: {load adapter: option}, e.g. TCP's brake override; default: the
        manifest's. Their older keywords (`brake_override=`, `twin_p=`) are accepted too.
    adapter: a per-sample transform with settings, run in the workers before collation: a
        model-ready adapter's name ("tcp", "garage", "transfuser2022", "b2d_tcp"), whose
        batches are that codebase's dicts (it sets cameras, image_size, fields and the LiDAR
        histogram), or your own function `fn(sample, rng) -> sample` on each `CARLASample`.
    history: K earlier frames of the same route per sample, or `History(K, stride)`: every
        per-frame value gets a time axis (B, K + 1, ...), oldest first (with an adapter, its
        dict's values: each frame goes through it alone); `stride` is samples between those
        frames, or seconds such as "1s".
    mix: train on a mix of packs instead of one `source`: a mix spec (entries with a source
        and a weight, optionally over buckets).
"""
