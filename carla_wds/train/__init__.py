"""The training wing: the bundled torchrun waypoint trainer (`python -m carla_wds.train`).

It uses only `carla_wds.load`'s public names (tests/test_imports.py). Importing this package
imports nothing; `loop` holds the trainer, read top to bottom.
"""
