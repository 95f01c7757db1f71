"""Room: getting batches from the DataLoader workers to the training loop.

`workers` (what each worker runs for one pass, and the main side that drives them), `ring`
and `rings` (shared-memory rings for image batches), `dictring` (the same for dict batches)
and `pinning` (`pin_memory=True`, off the training thread).
"""
