"""Upper bounds of the config values that size an allocation (issue 38 N7), and why each is
where it is. `carla-wds show --checkpoint` builds a loader and a model from a checkpoint's stored
config, so a 1 KB file could otherwise ask for `image_size [30000, 30000]` or `feature_dim 10**8`;
the same bounds hold for `train --config` YAML and `key=value` overrides (one validator,
settings.validate). Real runs sit 10-100x below each.
"""
from __future__ import annotations

# The data (config.DataConfig, TrainConfig.show_samples).
# Per-rank batch: TCP and TransFuser train at 32-64 a GPU; 4096 images a camera fill any GPU.
MAX_BATCH = 4096
# Image side in pixels: CARLA rigs render at most 1600-1920 wide and models see 256-1024;
# 4096 is a 4K sensor at full size.
MAX_IMAGE_SIDE = 4096
# Earlier frames per sample: the clip benchmarks use 31 (docs/benchmarks.md).
MAX_HISTORY = 256
# Samples between two frames of a window: a route at 2 Hz of 10 minutes is 1,200 samples.
MAX_HISTORY_STRIDE = 1000
# DataLoader processes per rank: one a core of the largest nodes.
MAX_WORKERS = 256
# Raw samples (0.1-1 MB each) a worker holds to shuffle: webdataset's examples use 1-5k.
MAX_SHUFFLE_BUFFER = 20_000
# Rows of show's montage, one sample each, decoded in one batch.
MAX_SHOW_SAMPLES = 256
# The pixels of one camera in one batch, batch x (history + 1) x height x width: 2^31 (2.1 G
# pixels, 6.4 GB as uint8) is 250x TransFuser++'s 32 x 256 x 1024, and each value alone within
# its bound can still multiply to far more (4096 x 257 x 4096 x 4096).
MAX_BATCH_PIXELS = 2 ** 31

# The model (model.py). TCP's GRU is 256 wide; at 4096 its recurrent weights alone are 50M
# parameters. The cameras and horizon come from the shards: 8-camera rigs and 10 waypoints at
# 2 Hz are the largest shipped; a GRU step per waypoint past 1000 is no driving horizon.
MAX_FEATURE_DIM = 4096
MAX_CAMERAS = 64
MAX_PRED_LEN = 1000
