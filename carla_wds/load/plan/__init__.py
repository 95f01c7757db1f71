"""Room: which samples each rank and worker reads, and in what order.

Pure functions of the manifests' counts, the seed and the split: `epoch` (the plan of one
pass: shards cut into (rank, worker) reads, batches per rank), `mix` and `mix_presets` (an
epoch drawn from entries over packs), `strata` (each global batch holding each entry's share)
and `reshape` (the rest of an epoch after the world size or worker count changed). Nothing here
reads a shard.
"""
