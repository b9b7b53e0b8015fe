"""Avro binary readers compiled per writer schema: what ``fastavro.schemaless_reader`` returns, faster.

fastavro interprets the schema for every value it reads (~22 µs for one Debezium envelope of an
8-column table, most of the CDC consumer's time per Avro event). :func:`compile_reader` turns a
writer schema, once, into Python source with one straight-line block per field -- no dispatch on
the schema while reading -- and returns ``read(data) -> (datum, end)``. The datum is exactly what
``fastavro.schemaless_reader(io.BytesIO(data), parse_schema(schema), None)`` returns for a schema
without ``logicalType`` annotations (:mod:`.avro` strips them): records as dicts in field order,
unions as the branch's value, enums as their symbol, ``fixed`` and ``bytes`` as bytes, ``int`` and
``long`` as ints, ``float`` and ``double`` as floats, booleans as ``byte != 0``.

A body that ends early, a negative length, an index past a union's branches or an enum's symbols,
or a varint past 64 bits (which fastavro's C reader wraps around: the one place the two differ, on
corrupt data only) raises (IndexError, EOFError, ValueError, struct.error, UnicodeDecodeError); :func:`.avro.read`
turns any of them into a ``DecodeError``. A schema this does not compile (nothing Debezium writes)
gives None, and fastavro reads it. tests/unit/services/cdc_consumer/test_avro_reader.py compares
both readers on every type and on the recorded Debezium events.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

Reader = Callable[[bytes], tuple[Any, int]]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class _Unsupported(Exception):
    pass


def _long_rest(data: bytes, pos: int, b: int) -> tuple[int, int]:
    """The rest of a zig-zag varint whose first byte ``b`` (>= 0x80) was read; ``pos`` is after it.

    Unrolled (a loop costs twice as much for the 8- and 9-byte timestamps Debezium sends). One past
    64 bits is corrupt data: a ValueError (fastavro's C reader wraps it around instead)."""
    n = b & 0x7F
    c = data[pos]
    n |= (c & 0x7F) << 7
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 1
    c = data[pos + 1]
    n |= (c & 0x7F) << 14
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 2
    c = data[pos + 2]
    n |= (c & 0x7F) << 21
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 3
    c = data[pos + 3]
    n |= (c & 0x7F) << 28
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 4
    c = data[pos + 4]
    n |= (c & 0x7F) << 35
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 5
    c = data[pos + 5]
    n |= (c & 0x7F) << 42
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 6
    c = data[pos + 6]
    n |= (c & 0x7F) << 49
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 7
    c = data[pos + 7]
    n |= (c & 0x7F) << 56
    if c < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 8
    c = data[pos + 8]
    n |= (c & 0x7F) << 63
    if c < 0x80:
        if n >> 64:
            raise ValueError("a varint past 64 bits")
        return (n >> 1) ^ -(n & 1), pos + 9
    raise ValueError("a varint past 64 bits")


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0
        self.named: dict[str, Any] = {}  # full name -> schema
        self.funcs: dict[str, str] = {}  # full name of a record read by a function -> its name
        self.pending: list[tuple[str, Any, str]] = []  # (function, record schema, namespace)
        self.inlining: list[str] = []  # the records whose fields are being written out, outermost first
        self.consts: dict[str, Any] = {}

    def var(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def const(self, value: Any) -> str:
        name = f"C{len(self.consts)}"
        self.consts[name] = value
        return name

    # ------------------------------------------------------------------ names

    def full(self, name: str, namespace: str) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def register(self, schema: Any, namespace: str) -> None:
        """Every named type of ``schema`` by its full name (a later reference may come first)."""
        if isinstance(schema, list):
            for s in schema:
                self.register(s, namespace)
            return
        if not isinstance(schema, dict):
            return
        t = schema.get("type")
        if t in ("record", "error", "enum", "fixed"):
            full = self.full(schema["name"], schema.get("namespace", namespace))
            if full in self.named:
                return
            self.named[full] = schema
            ns = full.rsplit(".", 1)[0] if "." in full else ""
            if t != "enum" and t != "fixed":
                for f in schema.get("fields", ()):
                    self.register(f["type"], ns)
            return
        if t == "array":
            self.register(schema.get("items"), namespace)
        elif t == "map":
            self.register(schema.get("values"), namespace)
        elif isinstance(t, (dict, list)):
            self.register(t, namespace)

    def resolve(self, schema: Any, namespace: str) -> tuple[Any, str]:
        """(schema, its namespace) with a name reference replaced by the named type."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            found = self.named.get(schema) or self.named.get(self.full(schema, namespace))
            if found is None:
                raise _Unsupported(schema)
            full = schema if schema in self.named else self.full(schema, namespace)
            return found, full.rsplit(".", 1)[0] if "." in full else ""
        if isinstance(schema, dict):
            t = schema.get("type")
            if isinstance(t, (dict, list)) or (
                isinstance(t, str)
                and t not in _PRIMITIVES
                and t not in ("record", "error", "enum", "fixed", "array", "map")
            ):
                return self.resolve(t, namespace)
        return schema, namespace

    # ------------------------------------------------------------------ code

    def emit(self, out: list[str], ind: str, target: str, schema: Any, namespace: str) -> None:
        """Lines that read one value of ``schema`` into the local ``target``."""
        schema, namespace = self.resolve(schema, namespace)
        if isinstance(schema, list):
            self.union(out, ind, target, schema, namespace)
            return
        t = schema.get("type") if isinstance(schema, dict) else schema
        if t == "null":
            out.append(f"{ind}{target} = None")
        elif t in ("int", "long"):
            self.long(out, ind, target)
        elif t == "boolean":
            out.append(f"{ind}{target} = data[pos] != 0")
            out.append(f"{ind}pos += 1")
        elif t == "double":
            out.append(f"{ind}{target} = unpack_d(data, pos)[0]")
            out.append(f"{ind}pos += 8")
        elif t == "float":
            out.append(f"{ind}{target} = unpack_f(data, pos)[0]")
            out.append(f"{ind}pos += 4")
        elif t in ("string", "bytes"):
            n = self.var()
            self.long(out, ind, n)
            end = self.var()
            out.append(f"{ind}{end} = pos + {n}")
            out.append(f"{ind}if {n} < 0 or {end} > size: raise EOFError('a length past the end')")
            out.append(f"{ind}{target} = data[pos:{end}]{'.decode()' if t == 'string' else ''}")
            out.append(f"{ind}pos = {end}")
        elif t == "fixed":
            size = int(schema["size"])
            out.append(f"{ind}if pos + {size} > size: raise EOFError('a fixed past the end')")
            out.append(f"{ind}{target} = data[pos:pos + {size}]")
            out.append(f"{ind}pos += {size}")
        elif t == "enum":
            symbols = self.const(tuple(schema["symbols"]))
            i = self.var()
            self.long(out, ind, i)
            out.append(f"{ind}if {i} < 0: raise ValueError('a negative enum index')")
            out.append(f"{ind}{target} = {symbols}[{i}]")
        elif t in ("record", "error"):
            full = self.full(schema["name"], schema.get("namespace", namespace))
            ns = full.rsplit(".", 1)[0] if "." in full else ""
            if full not in self.inlining and len(self.inlining) < 8:  # its fields read right here
                self.inlining.append(full)
                self.fields(out, ind, target, schema, ns)
                self.inlining.pop()
                return
            func = self.funcs.get(full)  # a record inside itself: read by a function
            if func is None:
                func = self.funcs[full] = f"r{len(self.funcs)}"
                self.pending.append((func, schema, ns))
            out.append(f"{ind}{target}, pos = {func}(data, pos, size)")
        elif t in ("array", "map"):
            self.blocks(out, ind, target, schema, namespace)
        else:
            raise _Unsupported(repr(t))

    def long(self, out: list[str], ind: str, target: str) -> None:
        out.append(f"{ind}b = data[pos]")
        out.append(f"{ind}pos += 1")
        out.append(f"{ind}if b < 128:")
        out.append(f"{ind}    {target} = (b >> 1) ^ -(b & 1)")
        out.append(f"{ind}else:")
        out.append(f"{ind}    {target}, pos = long_rest(data, pos, b)")

    def union(self, out: list[str], ind: str, target: str, branches: list[Any], namespace: str) -> None:
        i = self.var()
        bad = f"{ind}    raise ValueError(f'union index {{{i}}} of {len(branches)} branches')"
        if len(branches) > 63:  # an index past one varint byte
            self.long(out, ind, i)
            for k, branch in enumerate(branches):
                out.append(f"{ind}{'if' if k == 0 else 'elif'} {i} == {k}:")
                self.emit(out, ind + "    ", target, branch, namespace)
            out += [f"{ind}else:", bad]
            return
        # the index's one byte compared as it is (index k is zig-zag 2k)
        out.append(f"{ind}{i} = data[pos]")
        out.append(f"{ind}pos += 1")
        for k, branch in enumerate(branches):
            out.append(f"{ind}{'if' if k == 0 else 'elif'} {i} == {2 * k}:")
            self.emit(out, ind + "    ", target, branch, namespace)
        out += [f"{ind}elif {i} >= 128:", f"{ind}    {i}, pos = long_rest(data, pos, {i})", bad]
        out += [f"{ind}else:", f"{ind}    {i} = ({i} >> 1) ^ -({i} & 1)", bad]

    def blocks(self, out: list[str], ind: str, target: str, schema: dict[str, Any], namespace: str) -> None:
        is_map = schema["type"] == "map"
        count, item, key, end = self.var(), self.var(), self.var(), self.var()
        out.append(f"{ind}{target} = {{}}" if is_map else f"{ind}{target} = []")
        out.append(f"{ind}while True:")
        inner = ind + "    "
        self.long(out, inner, count)
        out.append(f"{inner}if {count} == 0:")
        out.append(f"{inner}    break")
        out.append(f"{inner}if {count} < 0:")
        out.append(f"{inner}    {count} = -{count}")
        self.long(out, inner + "    ", end)  # the block's size in bytes: not needed
        out.append(f"{inner}for _ in range({count}):")
        body = inner + "    "
        if is_map:
            self.emit(out, body, key, "string", namespace)
            self.emit(out, body, item, schema["values"], namespace)
            out.append(f"{body}{target}[{key}] = {item}")
        else:
            self.emit(out, body, item, schema["items"], namespace)
            out.append(f"{body}{target}.append({item})")

    def fields(self, out: list[str], ind: str, target: str, schema: dict[str, Any], namespace: str) -> None:
        """Lines that read a record's fields, then make ``target`` its dict (fields in order)."""
        names = []
        for f in schema.get("fields", ()):
            v = self.var()
            self.emit(out, ind, v, f["type"], namespace)
            names.append((f["name"], v))
        items = ", ".join(f"{name!r}: {v}" for name, v in names)
        out.append(f"{ind}{target} = {{{items}}}")

    def record_function(self, func: str, schema: dict[str, Any], namespace: str) -> list[str]:
        out = [f"def {func}(data, pos, size):"]
        self.inlining = [self.full(schema["name"], schema.get("namespace", namespace))]
        self.fields(out, "    ", "out", schema, namespace)
        out.append("    return out, pos")
        return out


def compile_reader(schema: Any) -> Reader | None:
    """A reader of Avro binary data of writer schema ``schema`` (JSON form, without logical types),
    or None for a schema it does not compile."""
    gen = _Gen()
    try:
        gen.register(schema, "")
        top: list[str] = ["def read(data):", "    size = len(data)", "    pos = 0"]
        gen.emit(top, "    ", "out", schema, "")
        top.append("    return out, pos")
        functions: list[str] = []
        while gen.pending:
            func, rec, ns = gen.pending.pop()
            functions.extend(gen.record_function(func, rec, ns))
    except (_Unsupported, KeyError, TypeError, ValueError, AttributeError):
        return None
    source = "\n".join([*functions, *top])
    namespace: dict[str, Any] = {
        "long_rest": _long_rest,
        "unpack_d": struct.Struct("<d").unpack_from,
        "unpack_f": struct.Struct("<f").unpack_from,
        **gen.consts,
    }
    try:
        exec(compile(source, "<avro reader>", "exec"), namespace)  # the code generated above
    except (SyntaxError, RecursionError):
        return None
    return namespace["read"]  # type: ignore[no-any-return]
