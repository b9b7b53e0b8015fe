"""PostgreSQL values at the edges of their types, and what Inlet stores for each (issue #21).

One table, ``edge_ddl(name)``, and its rows, ``edge_rows(first_id)``: the infinities of timestamp,
timestamptz and date, the first and last days, numeric(38,18) at full precision, numerics beyond 38
digits and NaN/Infinity, float NaN and infinities (also in arrays), arrays with NULLs and quotes,
jsonb/json, uuid, bytea, an enum with quotes, intervals at Debezium's limits, money's bounds, time
24:00 and timetz. ``EDGE_STORED`` is what the writer stores for them, by row id (dates and
timestamps as their day and microsecond numbers, NaN as "nan" through :func:`nan_text`), worked out
from the SQL literals and the mappings in docs/cdc.md ("Values at the edges"): the initial load's COPY
must store exactly this (tests/integration/writer/test_initial_load_copy.py), and so must streaming
through the live Debezium connector (tests/integration/cdc_consumer/test_decode_live_types.py).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import numpy as np

I64_MAX, I64_MIN, I32_MAX, I32_MIN = 2**63 - 1, -(2**63), 2**31 - 1, -(2**31)

COLUMNS = (
    "id int PRIMARY KEY, ts timestamp, ts0 timestamp(0), tstz timestamptz, d date, n38 numeric(38,18), "
    "nfree numeric, n50 numeric(50,10), f4 real, f8 double precision, ta text[], ia int[], fa float8[], "
    "f4a real[], jb jsonb, j json, u uuid, ba bytea, e {mood}, iv interval, m money, tm time, ttz timetz"
)


def edge_ddl(table: str) -> list[str]:
    """The table (and its enum type ``<table>_mood``)."""
    mood = f"{table}_mood"
    return [
        f"CREATE TYPE {mood} AS ENUM ('sad', 'it''s \"x\"')",
        f"CREATE TABLE {table} ({COLUMNS.format(mood=mood)})",
    ]


def edge_rows(first_id: int = 1) -> list[str]:
    """``VALUES`` tuples of the rows, ids from ``first_id`` (``EDGE_STORED`` has them from 1)."""
    return [row.replace("(", f"({first_id - 1} + ", 1) for row in _ROWS]


# id, then the columns in order
_ROWS = [
    """(1, 'infinity', 'infinity', 'infinity', 'infinity', '12345678901234567890.123456789012345678',
        '123456789012345678901234567890123456789012345.678901', '1234567890123456789012345678901234567890.0123456789',
        'NaN', 'Infinity', ARRAY['say "hi"', NULL, 'it''s', 'back\\slash', '{braces}', 'NULL', '', ' sp '],
        '{1,NULL,3}', '{NaN,Infinity,-Infinity,1.5,NULL}', '{NaN,3.4028235e38}',
        '{"k": "va\\"l", "u": "\\u00e9", "n": 1.0e2, "z": [true, null]}', '{"keep":  "spacing" }',
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff7f80', 'it''s "x"', '178000000 years',
        '92233720368547758.07', '24:00:00', '24:00:00+00')""",
    """(2, '-infinity', '-infinity', '-infinity', '-infinity', '-99999999999999999999.999999999999999999',
        'NaN', 'NaN', '-Infinity', 'NaN', '{}', '{NULL}', '{}', NULL, '[]', '[]',
        '00000000-0000-0000-0000-000000000000', '\\x', 'sad', '-178000000 years', '-92233720368547758.08',
        '00:00:00', '00:00:00-15:59')""",
    """(3, '10000-01-01 00:00:00', '4713-01-01 00:00:00 BC', '10000-01-01 00:00:00+00', '5874897-12-31', NULL,
        '1E+50', '1e-10', '3.4028235e38', '-1.7976931348623157e308', NULL, NULL, NULL, NULL, 'null', '1', NULL,
        NULL, NULL, '1 year 2 mons 3 days 04:05:06.789', '0.01', '23:59:59.999999', '10:15:30.12345+02')""",
    "(4, NULL, NULL, NULL, NULL, NULL, 'Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, '2147483647 hours 59 minutes 59.999999 seconds', NULL, NULL, NULL)",
    "(5, NULL, NULL, NULL, NULL, NULL, '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, '-1 year -2 mons +3 days -04:05:06.000001', NULL, NULL, NULL)",
    "(6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, 'infinity', NULL, NULL, NULL)",
]


# what the writer stores for those rows: the mappings of docs/cdc.md; numeric NaN/Infinity null
# (Debezium sends null); intervals as Debezium computes MicroDuration (in doubles: 2147483647 hours
# 59:59.999999 is 7730941132800000000; '178000000 years' saturates; 'infinity' is 0)
EDGE_STORED: dict[int, dict[str, Any]] = {
    1: {
        "ts": I64_MAX,
        "ts0": I64_MAX,
        "tstz": I64_MAX,
        "d": I32_MAX,
        "n38": Decimal("12345678901234567890.123456789012345678"),
        "nfree": "123456789012345678901234567890123456789012345.678901",
        "n50": "1234567890123456789012345678901234567890.0123456789",
        "f4": "nan",
        "f8": math.inf,
        "ta": ['say "hi"', None, "it's", "back\\slash", "{braces}", "NULL", "", " sp "],
        "ia": [1, None, 3],
        "fa": ["nan", math.inf, -math.inf, 1.5, None],
        "f4a": ["nan", float(np.float32(3.4028235e38))],
        "jb": '{"k": "va\\"l", "n": 100, "u": "é", "z": [true, null]}',
        "j": '{"keep":  "spacing" }',
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "ba": b"\x00\xff\x7f\x80",
        "e": 'it\'s "x"',
        "iv": I64_MAX,
        "m": "92233720368547758.07",
        "tm": 86_400_000_000,
        "ttz": "00:00:00Z",
    },
    2: {
        "ts": I64_MIN,
        "ts0": I64_MIN,
        "tstz": I64_MIN,
        "d": I32_MIN,
        "n38": Decimal("-99999999999999999999.999999999999999999"),
        "nfree": None,
        "n50": None,
        "f4": -math.inf,
        "f8": "nan",
        "ta": [],
        "ia": [None],
        "fa": [],
        "f4a": None,
        "jb": "[]",
        "j": "[]",
        "u": "00000000-0000-0000-0000-000000000000",
        "ba": b"",
        "e": "sad",
        "iv": I64_MIN,
        "m": "-92233720368547758.08",
        "tm": 0,
        "ttz": "15:59:00Z",
    },
    3: {
        "ts": 253402300800000000,
        "ts0": -210863520000000000,
        "tstz": 253402300800000000,
        "d": 2145042905,
        "nfree": "1" + "0" * 50,
        "n50": "0.0000000001",
        "f4": float(np.float32(3.4028235e38)),
        "f8": -1.7976931348623157e308,
        "jb": "null",
        "j": "1",
        "iv": 37091106789000,
        "m": "0.01",
        "tm": 86_399_999_999,
        "ttz": "08:15:30.12345Z",
    },
    4: {"nfree": None, "iv": 7730941132800000000},
    5: {"nfree": None, "iv": -36572706000001},
    6: {"iv": 0},
}


def nan_text(v: Any) -> Any:
    """``v`` with NaN (also inside a list) as "nan", so rows compare equal."""
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, list):
        return [nan_text(x) for x in v]
    return v
