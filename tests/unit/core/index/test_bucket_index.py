"""Bucket hashing agrees bit for bit with Java, and bucket-index tables put keys in their bucket."""

from __future__ import annotations

import random
import shutil
import subprocess
from typing import Any

import pyarrow as pa
import pytest

from inlet.core.file_group.view import BaseFile, list_data_files
from inlet.core.index import bucket as index

JAVA_SOURCE = r"""
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/** Reads "n<TAB>elem<TAB>elem..." lines (elements as hex UTF-16 code units, "~" for null). */
public class JavaHashes {
    static String decode(String hex) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < hex.length(); i += 4) {
            sb.append((char) Integer.parseInt(hex.substring(i, i + 4), 16));
        }
        return sb.toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            int n = Integer.parseInt(parts[0]);
            List<String> values = new ArrayList<>();
            StringBuilder hashes = new StringBuilder();
            for (int i = 1; i < parts.length; i++) {
                String v = parts[i].equals("~") ? null : decode(parts[i]);
                values.add(v);
                if (i > 1) hashes.append(',');
                hashes.append(v == null ? "null" : Integer.toString(v.hashCode()));
            }
            List<String> list = Arrays.asList(values.toArray(new String[0]));
            int listHash = list.hashCode();
            out.append(hashes).append(';').append(listHash).append(';')
               .append((listHash & Integer.MAX_VALUE) % n).append('\n');
        }
        System.out.print(out);
    }
}
"""


def _encode(value: str | None) -> str:
    if value is None:
        return "~"
    data = value.encode("utf-16-be", "surrogatepass")
    return data.hex()


def _corpus() -> list[str]:
    rng = random.Random(20240607)
    fixed = [
        "",
        "a",
        "id",
        "0",
        "1",
        "-1",
        "12345678901234567890",
        "hello world",
        "café",
        "Ünïcödé ñ",
        "naïve façade",
        "東京",
        "Ελληνικά",
        "עברית",
        "😀",
        "a😀b",
        "👩\u200d💻",
        "𝄞 music",
        "\U0010ffff",
        "\ud800",  # a lone surrogate: a valid Java string
        "tab\there",
        "new\nline",
        "\x00nul",
        "2024-01-02 03:04:05.678",
        "a:b",
        "a,b",
        "x" * 1000,
        "ab" * 5000,
        "é" * 777,
        "😀" * 300,
    ]
    alphabet = [chr(c) for c in range(0x20, 0x7F)] + list("éüñßøåçЖжλπ東京😀👍🏽𝄞")
    rand = []
    for _ in range(260):
        n = rng.choice([0, 1, 2, 3, 5, 8, 13, 40, 120])
        rand.append("".join(rng.choice(alphabet) for _ in range(n)))
    for _ in range(40):  # arbitrary code points, BMP (no surrogates) and beyond
        n = rng.randint(1, 12)
        cps = [
            rng.choice(
                [rng.randint(0x80, 0xD7FF), rng.randint(0xE000, 0xFFFF), rng.randint(0x10000, 0x10FFFF)]
            )
        ]
        cps += [rng.randint(0x20, 0x10FFFF) for _ in range(n)]
        rand.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
    return fixed + rand


@pytest.fixture(scope="module")
def java_hashes(tmp_path_factory: pytest.TempPathFactory) -> Any:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("javac/java not installed: cannot compare the hashes with Java")
    work = tmp_path_factory.mktemp("javahash")
    (work / "JavaHashes.java").write_text(JAVA_SOURCE)
    subprocess.run([javac, "JavaHashes.java"], cwd=work, check=True, capture_output=True, timeout=120)

    def run(cases: list[tuple[int, list[str | None]]]) -> list[tuple[list[int | None], int, int]]:
        text = "".join(f"{n}" + "".join(f"\t{_encode(v)}" for v in vals) + "\n" for n, vals in cases)
        proc = subprocess.run(
            [java, "-cp", str(work), "JavaHashes"],
            input=text.encode(),
            capture_output=True,
            check=True,
            timeout=120,
        )
        out = []
        for line in proc.stdout.decode().splitlines():
            hashes, list_hash, bucket = line.split(";")
            hs = [None if h == "null" else int(h) for h in hashes.split(",")] if hashes else []
            out.append((hs, int(list_hash), int(bucket)))
        assert len(out) == len(cases)
        return out

    return run


def test_string_and_list_hashes_match_java(java_hashes: Any) -> None:
    strings = _corpus()
    assert len(strings) >= 300
    rng = random.Random(7)
    buckets = [1, 2, 3, 4, 7, 8, 16, 100, 256, 1000, 2**31 - 1]
    cases: list[tuple[int, list[str | None]]] = [(rng.choice(buckets), [s]) for s in strings]
    for _ in range(150):  # multi-value keys, some with nulls
        k = rng.randint(2, 4)
        vals: list[str | None] = [rng.choice(strings) if rng.random() > 0.15 else None for _ in range(k)]
        cases.append((rng.choice(buckets), vals))
    cases.append((5, []))
    java = java_hashes(cases)
    for (n, vals), (j_hashes, j_list, j_bucket) in zip(cases, java, strict=True):
        assert [index.java_string_hash(v) if v is not None else None for v in vals] == j_hashes, vals
        assert index.java_list_hash(vals) == j_list, vals
        assert -(2**31) <= j_list < 2**31
        # bucket_id of a record key that hashes to exactly these values
        if len(vals) == 1 and vals[0] is not None and not ("," in vals[0] and ":" in vals[0]):
            assert index.bucket_id(vals[0], ["id"], n) == j_bucket, vals
        elif vals and all(v is not None and v and "," not in v and ":" not in v for v in vals):
            fields = [f"f{i}" for i in range(len(vals))]
            key = ",".join(f"{f}:{v}" for f, v in zip(fields, vals, strict=True))
            assert index.hash_key_values(key, fields) == vals
            assert index.bucket_id(key, fields, n) == j_bucket, key


def test_vectorised_bucket_ids_match_java(java_hashes: Any) -> None:
    """bucket_ids hashes ASCII keys with numpy and the others one by one: both agree with Java."""
    strings = [s for s in _corpus() if "\ud800" not in s]  # Arrow strings are valid UTF-8
    strings += [str(i) for i in range(-50, 500)] + ["id:1,name:a", "a:b", "a,b", "x" * 70000]
    rng = random.Random(11)
    for n in (1, 4, 16, 64, 1000, 2**31 - 1):
        java = [bucket for _, _, bucket in java_hashes([(n, [s]) for s in strings])]
        simple = [b for s, b in zip(strings, java, strict=True) if not ("," in s and ":" in s)]
        keys = pa.array([s for s in strings if not ("," in s and ":" in s)])
        assert index.bucket_ids(keys, ["id"], n).to_pylist() == simple
        start = rng.randint(1, 40)
        chunked = pa.chunked_array([keys.slice(0, 100), keys.slice(100)]).slice(start)
        assert index.bucket_ids(chunked, ["id"], n).to_pylist() == simple[start:]
    complex_keys = ["id:1,name:Alice", "id:__null__,name:x", "ts:2024-01-02 03:04:05,id:1", "abc"]
    want = [index.bucket_id(k, ["id", "name"], 97) for k in complex_keys]
    assert index.bucket_ids(pa.array(complex_keys), ["id", "name"], 97).to_pylist() == want
    assert index.bucket_ids(pa.array([], pa.string()), ["id"], 8).to_pylist() == []


def test_known_java_values() -> None:
    # fixed points of java.lang.String#hashCode
    assert index.java_string_hash("") == 0
    assert index.java_string_hash("a") == 97
    assert index.java_string_hash("hello") == 99162322
    assert index.java_string_hash("polygenelubricants") == -(2**31)
    assert index.java_list_hash([]) == 1
    assert index.java_list_hash([None]) == 31
    assert index.java_list_hash(["a"]) == 31 + 97


@pytest.mark.parametrize(
    ("key", "fields", "expected"),
    [
        ("abc", ["id"], ["abc"]),
        ("abc", [""], ["abc"]),
        ("id:1", ["id"], ["id:1"]),  # no ',': the whole key
        ("a,b", ["id"], ["a,b"]),  # no ':': the whole key
        ("id:1,name:Alice", ["id", "name"], ["1", "Alice"]),
        ("id:1,name:Alice", ["name"], ["Alice"]),
        ("id:1,name:Alice", ["id"], ["1"]),
        ("id:1,name:Alice", ["name", "id"], ["1", "Alice"]),  # in the key's order
        ("id:1,name:Alice", [], ["1", "Alice"]),
        ("id:1,name:Alice", ["other"], ["id:1,name:Alice"]),  # nothing matched: the whole key
        ("id:__null__,name:Alice", ["id", "name"], [None, "Alice"]),
        ("id:__empty__,name:Alice", ["id", "name"], ["", "Alice"]),
        ("id:1,ts:2024-01-02 03:04:05", ["id", "ts"], ["1", "2024-01-02 03:04:05"]),
        ("ts:2024-01-02 03:04:05,id:1", ["id", "ts"], ["2024-01-02 03:04:05", "1"]),
        ("ts:2024-01-02 03:04:05,id:1", ["id"], ["1"]),
        ("f1:abc,f2:bcd,efg", ["f1", "f2"], ["abc", "bcd,efg"]),
        ("f1:a,b,f2:c", ["f2"], ["c"]),
        ("f1:a,b,f2:c", ["f1"], ["a,b"]),
        ("a:1,b:2:3", ["a"], ["1"]),  # a skipped last value holding ':' (Java loops forever here)
        ("a:1,b:x:y,c:3", ["b", "c"], ["x:y", "3"]),
    ],
)
def test_hash_key_values(key: str, fields: list[str], expected: list[str | None]) -> None:
    assert index.hash_key_values(key, fields) == expected


def test_bucket_id_uses_hash_values() -> None:
    key = "id:1,name:Alice"
    want = (index.java_list_hash(["1", "Alice"]) & 0x7FFFFFFF) % 16
    assert index.bucket_id(key, ["id", "name"], 16) == want
    assert index.bucket_id("42", ["id"], 16) == (index.java_list_hash(["42"]) & 0x7FFFFFFF) % 16
    # a null hash value counts as 0 in List#hashCode
    assert index.bucket_id("id:__null__,name:x", ["id", "name"], 97) == (31 * (31 + 0) + 120) % 97


def test_file_id_prefixes() -> None:
    fid = index.bucket_file_id_prefix(7)
    assert fid.startswith("00000007") and len(fid) == 36
    assert index.bucket_of_file_id(fid + "-0") == 7
    assert index.nbcc_bucket_file_id(12) == "00000012-0000-0000-0000-000000000000-0"
    assert index.bucket_of_file_id("abcdefgh-0000") is None


@pytest.mark.parametrize("record_key", ["id", "id,city"])
def test_bucket_index_table_routes_each_key_to_its_bucket(
    record_key: str, trips_table: Any, kit: Any
) -> None:
    buckets = 8
    table = trips_table(record_key=record_key, index="bucket", buckets=buckets)

    def city(i: int) -> str:
        return ["sf", "nyc", "la"][i % 3]

    table.write(kit.trips(list(range(60)), [city(i) for i in range(60)], 1, "v1"), "upsert")
    second = table.write(kit.trips(list(range(50, 90)), [city(i) for i in range(50, 90)], 2, "v2"), "upsert")
    assert second.num_updates == 10 and second.num_inserts == 30
    fields = record_key.split(",")
    rows = table.read(columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "id"])
    assert sorted(rows.column("id").to_pylist()) == list(range(90))
    seen_buckets = set()
    rows = table.read(columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "id"])
    assert (
        rows.num_rows
        == 90
        - len(
            [
                i
                for i in range(50, 60)
                if ["sf", "nyc", "la"][i % 3] != ["sf", "nyc", "la", "sf"][(i - 50) % 4]
            ]
        )
        * 0
    )
    for r in rows.to_pylist():
        key = r["_hoodie_record_key"]
        if len(fields) > 1:
            assert key == f"id:{r['id']},city:{r['_hoodie_partition_path']}"
        bucket = index.bucket_id(key, fields, buckets)
        assert 0 <= bucket < buckets
        prefix = r["_hoodie_file_name"][:8]
        assert prefix == f"{bucket:08d}", (key, r["_hoodie_file_name"])
        seen_buckets.add(bucket)
    assert len(seen_buckets) > 1
    # one file group per (partition, bucket), all named by their bucket
    groups = {}
    for info in list_data_files(table.storage):
        bf = BaseFile.parse(info.path)
        if bf is None:
            continue
        b = index.bucket_of_file_id(bf.file_id)
        assert b is not None and 0 <= b < buckets
        groups.setdefault((bf.partition, b), set()).add(bf.file_id)
    assert all(len(ids) == 1 for ids in groups.values()), groups
    # and the independent reader reads them back
    for v in ("1", "2"):
        assert len(kit.read_hudi(table.base_path, v)) == rows.num_rows
