"""The CDC consumer: Debezium PostgreSQL records -> Inlet's typed change events.

:class:`Decoder` turns one Kafka record (JSON with or without schemas, or Confluent Avro) into
``inlet.proto.changes.v1.ChangeRecord`` messages; :func:`render_change` shows a ``ChangeEvent`` as
one JSON object (what ``inlet cdc decode`` prints).
"""

from inlet.services.cdc_consumer.catalog import CatalogColumn, PostgresCatalog
from inlet.services.cdc_consumer.decode import Decoder, KeylessMode, ValueFormat, row_record_key
from inlet.services.cdc_consumer.errors import DecodeError
from inlet.services.cdc_consumer.render import render_change, render_transaction

__all__ = [
    "CatalogColumn",
    "DecodeError",
    "Decoder",
    "KeylessMode",
    "PostgresCatalog",
    "ValueFormat",
    "render_change",
    "render_transaction",
    "row_record_key",
]
