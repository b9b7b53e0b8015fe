"""The Kafka janitor service: retention for Tansu's S3 storage, which never deletes a batch object.

``janitor`` holds one pass (the groups' committed offsets, the rules, the deletes) and the loop
``inlet kafka-janitor run`` serves; docs/kafka-storage.md says why deleting is safe with Tansu 0.6.
"""

from inlet.services.kafka_janitor.janitor import (
    JanitorConfig,
    JanitorError,
    KafkaJanitor,
    Rule,
    deletable,
    low_watermarks,
    parse_rules,
)

__all__ = [
    "JanitorConfig",
    "JanitorError",
    "KafkaJanitor",
    "Rule",
    "deletable",
    "low_watermarks",
    "parse_rules",
]
