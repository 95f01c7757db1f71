"""Room: the stream of encoded samples one worker serves, before decoding.

`pipeline` (the stage protocol and the folding of a stage list), `served` (read in plan order,
the seeded shuffle buffer), `shardio` (segments cut out of shards), and the features that shape
that stream: `history` (each sample with its K earlier frames), `overlay` and `overlay_mix`
(overlay packs joined in step), `mappack` (a map pack's vectors per sample) and `common_view`
(packs of other layouts in one view). The front door (load/front.py) builds the stage list.
"""
