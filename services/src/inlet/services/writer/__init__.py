"""The writer service: change topics (``inlet.changes.<table_id>``) -> Hudi tables, exactly once.

Modules: :mod:`.rows` (ChangeEvents -> Arrow), :mod:`.checkpoint` (Hudi Streamer's Kafka checkpoint in
commit metadata), :mod:`.batcher` (per-table buffers and transaction-aligned cuts), :mod:`.tables`
(per-table configuration and creation), :mod:`.service` (the consumer loop), :mod:`.metrics`.
"""

#: the writer's Kafka consumer group; its offsets are committed only after the lake commit that
#: holds them, so its lag is what the lake still lacks
DEFAULT_GROUP = "inlet-writer"
