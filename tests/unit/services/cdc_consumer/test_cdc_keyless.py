"""Tables without a primary key: the decoder's ``keyless`` modes other than reject and whole_row
(issue #21). ``skip`` drops a table's changes and its entries in transaction ENDs, with one warning;
``auto`` without a source catalog cannot see the REPLICA IDENTITY and skips too, saying how to
replicate the table. (``auto`` with the catalog: tests/integration/cdc_consumer/test_keyless_identity.py.)
"""

from __future__ import annotations

import logging

import orjson
import pytest
from test_cdc_types import envelope

from inlet.services.cdc_consumer import Decoder
from inlet.services.cdc_consumer.settings import CdcConfig
from inlet.services.runtime import SettingsError

FIELDS = [{"type": "string", "optional": True, "field": "s"}]


def end(*tables: str) -> bytes:
    """A transaction END (JSON without schema) naming ``tables`` (schema.table), one change each."""
    collections = [{"data_collection": t, "event_count": 1} for t in tables]
    payload = {"status": "END", "id": "571:100", "event_count": len(tables), "data_collections": collections}
    return orjson.dumps(payload)


def warnings_about(caplog: pytest.LogCaptureFixture, table_id: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and table_id in r.getMessage()
    ]


def test_skip_drops_the_changes_and_end_entries_of_a_table_without_primary_key_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decoder = Decoder(keyless="skip")
    _, keyless = envelope(FIELDS, {"id": 1, "s": "a"})
    with caplog.at_level(logging.WARNING, "inlet.cdc"):
        assert decoder.decode("srv.public.t", 0, 0, None, keyless) == []
        assert decoder.decode("srv.public.t", 0, 1, None, keyless) == []
        truncate = orjson.loads(keyless)
        truncate["payload"].update(op="t", after=None)
        assert decoder.decode("srv.public.t", 0, 2, None, orjson.dumps(truncate)) == []
    (warning,) = warnings_about(caplog, "srv.public.t")
    assert "has no primary key: its changes are skipped (--keyless skip)" in warning
    recs = decoder.decode("srv.transaction", 0, 0, None, end("public.t", "public.other"))
    assert [r.transaction.table_id for r in recs] == ["srv.public.other"]
    # the table gets a primary key: replicated from then on, ENDs included
    key, keyed = envelope(FIELDS, {"id": 2, "s": "b"})
    (rec,) = decoder.decode("srv.public.t", 0, 3, key, keyed)
    assert rec.change.record_key == "2"
    recs = decoder.decode("srv.transaction", 0, 1, None, end("public.t"))
    assert [r.transaction.table_id for r in recs] == ["srv.public.t"]


def test_auto_without_a_catalog_skips_and_says_how_to_replicate_the_table(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, keyless = envelope(FIELDS, {"id": 1, "s": "a"})
    with caplog.at_level(logging.WARNING, "inlet.cdc"):
        assert Decoder(keyless="auto").decode("srv.public.t", 0, 0, None, keyless) == []
    (warning,) = warnings_about(caplog, "srv.public.t")
    assert "REPLICA IDENTITY is unknown" in warning and "--database-url" in warning


def test_the_service_skips_or_keys_by_identity_by_default_and_refuses_an_unknown_mode() -> None:
    assert CdcConfig.from_settings({"bootstrap": "b:1", "topics": ["x"]}).keyless == "auto"
    with pytest.raises(SettingsError, match="--keyless: choose auto, whole_row, skip or reject, not 'drop'"):
        CdcConfig.from_settings({"bootstrap": "b:1", "topics": ["x"], "keyless": "drop"})
