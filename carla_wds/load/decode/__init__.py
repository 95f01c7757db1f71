"""Room: decoding and batching, from encoded members to a CARLABatch or a codebase's dict.

`stages` (image decode, grouping into batches), `jpeg` (reduced-scale DCT decode), `augment`,
`fields` (the extra fields `fields=[...]` selects), `classes` (semantic class tables), `places`
(where each modality lands in a batch), `batch` (CARLASample, CARLABatch), `model_batch` (the
dict batch an adapter gives) and `transform` (sample_transform and the adapters' hooks; the
adapters themselves are their own room, load/adapters/).
"""
