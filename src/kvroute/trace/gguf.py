"""Read the metadata of a GGUF file: header and key/value section, never the tensors.

Layout (little-endian, GGUF v2 and v3; v1 and big-endian files are refused)::

    magic "GGUF" | u32 version | u64 num_tensors | u64 num_kv
    num_kv x ( string key | u32 value_type | value )

    string = u64 byte length + UTF-8 bytes
    array  = u32 element_type + u64 count + count elements (arrays of arrays allowed)

Only the bytes of the key/value section are touched (the file is memory-mapped), so a
100 MB model costs what its vocabulary costs: tens of milliseconds for 50k tokens.
Numeric arrays are decoded in one ``numpy.frombuffer`` call; string arrays are the only
per-element Python loop.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias, cast

import numpy as np

from kvroute.errors import TokenizerError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

GGUFValue: TypeAlias = int | float | bool | str | list[Any]
"""A metadata value: a scalar, or a (possibly nested) list of them."""


class GGUFValueType(enum.IntEnum):
    """Type tags of GGUF metadata values, as numbered in ``gguf.h``."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR_FORMATS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}

_NUMPY_DTYPES: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "<u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class GGUFMetadata:
    """The key/value metadata of one GGUF file.

    ``fields`` maps each key to its decoded value; ``field_types`` to its type tag and,
    for arrays, ``array_types`` to the element type. The typed getters raise
    :class:`~kvroute.errors.TokenizerError` naming the key when it is absent (and no
    default was given) or holds another type.
    """

    source: str
    version: int
    num_tensors: int
    fields: Mapping[str, GGUFValue]
    field_types: Mapping[str, GGUFValueType]
    array_types: Mapping[str, GGUFValueType]

    def __contains__(self, key: str) -> bool:
        return key in self.fields

    def get_str(self, key: str, default: str | None = None) -> str:
        return cast(str, self._get(key, default, (GGUFValueType.STRING,), "string"))

    def get_int(self, key: str, default: int | None = None) -> int:
        return cast(int, self._get(key, default, _INT_TYPES, "integer"))

    def get_bool(self, key: str, default: bool | None = None) -> bool:
        return cast(bool, self._get(key, default, (GGUFValueType.BOOL,), "bool"))

    def get_str_list(self, key: str) -> list[str]:
        return cast(list[str], self._get_list(key, (GGUFValueType.STRING,)))

    def get_int_list(self, key: str) -> list[int]:
        return cast(list[int], self._get_list(key, _INT_TYPES))

    def _get(
        self, key: str, default: GGUFValue | None, types: tuple[GGUFValueType, ...], kind: str
    ) -> GGUFValue:
        if key not in self.fields:
            if default is None:
                raise TokenizerError(f"{self.source}: GGUF metadata has no key '{key}'")
            return default
        if self.field_types[key] not in types:
            raise TokenizerError(
                f"{self.source}: GGUF key '{key}' is {self.field_types[key].name}, expected {kind}"
            )
        return self.fields[key]

    def _get_list(self, key: str, types: tuple[GGUFValueType, ...]) -> GGUFValue:
        if key not in self.fields:
            raise TokenizerError(f"{self.source}: GGUF metadata has no key '{key}'")
        if self.field_types[key] != GGUFValueType.ARRAY or self.array_types[key] not in types:
            raise TokenizerError(
                f"{self.source}: GGUF key '{key}' is not an array of "
                + "/".join(t.name for t in types)
            )
        return self.fields[key]


_INT_TYPES = (
    GGUFValueType.UINT8,
    GGUFValueType.INT8,
    GGUFValueType.UINT16,
    GGUFValueType.INT16,
    GGUFValueType.UINT32,
    GGUFValueType.INT32,
    GGUFValueType.UINT64,
    GGUFValueType.INT64,
)


class _Truncated(Exception):
    """Internal: a read ran past the end of the buffer."""


class _Reader:
    """A cursor over a byte buffer; every read checks bounds and raises ``_Truncated``."""

    __slots__ = ("buf", "pos", "size")

    def __init__(self, buf: bytes | mmap.mmap) -> None:
        self.buf = buf
        self.pos = 0
        self.size = len(buf)

    def take(self, num_bytes: int) -> int:
        """Advance by ``num_bytes``; return the position the read starts at."""
        start = self.pos
        end = start + num_bytes
        if num_bytes < 0 or end > self.size:
            raise _Truncated
        self.pos = end
        return start

    def u32(self) -> int:
        value: int = _U32.unpack_from(self.buf, self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = _U64.unpack_from(self.buf, self.take(8))[0]
        return value

    def string(self) -> str:
        length = self.u64()
        start = self.take(length)
        return self.buf[start : start + length].decode("utf-8", errors="surrogateescape")

    def value_type(self) -> GGUFValueType:
        tag = self.u32()
        try:
            return GGUFValueType(tag)
        except ValueError:
            raise TokenizerError(f"unknown GGUF value type {tag} at byte {self.pos - 4}") from None

    def value(self, vtype: GGUFValueType) -> GGUFValue:
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            return self.array()[1]
        fmt = _SCALAR_FORMATS[vtype]
        start = self.take(struct.calcsize(fmt))
        scalar: int | float | bool = struct.unpack_from(fmt, self.buf, start)[0]
        return scalar

    def array(self) -> tuple[GGUFValueType, list[Any]]:
        elem_type = self.value_type()
        count = self.u64()
        if elem_type == GGUFValueType.STRING:
            return elem_type, self._strings(count)
        if elem_type == GGUFValueType.ARRAY:
            return elem_type, [self.array()[1] for _ in range(count)]
        dtype = np.dtype(_NUMPY_DTYPES[elem_type])
        start = self.take(count * dtype.itemsize)
        values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=start)
        if elem_type == GGUFValueType.BOOL:
            values = values != 0
        items: list[Any] = values.tolist()
        return elem_type, items

    def _strings(self, count: int) -> list[str]:
        # The hot loop for 50k-token vocabularies: locals only, one bounds check each.
        buf, pos, size = self.buf, self.pos, self.size
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > size:
                raise _Truncated
            (length,) = unpack(buf, pos)
            pos += 8
            end = pos + length
            if end > size:
                raise _Truncated
            append(buf[pos:end].decode("utf-8", errors="surrogateescape"))
            pos = end
        self.pos = pos
        return out


def parse_gguf_metadata(buf: bytes | mmap.mmap, *, source: str = "<bytes>") -> GGUFMetadata:
    """Parse the header and key/value section at the start of ``buf``.

    ``buf`` may hold the whole file or just a prefix that covers the metadata. Strings
    are decoded as UTF-8; invalid bytes survive as surrogate escapes. Raises
    :class:`~kvroute.errors.TokenizerError` when ``buf`` is not GGUF, is big-endian, has an
    unsupported version, or ends before the key/value section does.
    """
    magic = bytes(buf[:4])
    if magic != GGUF_MAGIC:
        raise TokenizerError(
            f"{source}: not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})"
        )
    reader = _Reader(buf)
    reader.pos = 4
    try:
        version = reader.u32()
        if version not in SUPPORTED_VERSIONS:
            if version > 0xFFFF and int.from_bytes(version.to_bytes(4, "little"), "big") < 0xFFFF:
                raise TokenizerError(f"{source}: big-endian GGUF files are not supported")
            raise TokenizerError(
                f"{source}: GGUF version {version} is not supported (supported: 2, 3)"
            )
        num_tensors = reader.u64()
        num_kv = reader.u64()
        fields: dict[str, GGUFValue] = {}
        field_types: dict[str, GGUFValueType] = {}
        array_types: dict[str, GGUFValueType] = {}
        for _ in range(num_kv):
            key = reader.string()
            vtype = reader.value_type()
            if vtype == GGUFValueType.ARRAY:
                array_types[key], fields[key] = reader.array()
            else:
                fields[key] = reader.value(vtype)
            field_types[key] = vtype
    except _Truncated:
        raise TokenizerError(
            f"{source}: truncated GGUF file (metadata ends at byte {reader.pos}, "
            f"file has {reader.size})"
        ) from None
    except TokenizerError as exc:
        if exc.message.startswith(source):
            raise
        raise TokenizerError(f"{source}: {exc.message}", hint=exc.hint) from None
    return GGUFMetadata(
        source=source,
        version=version,
        num_tensors=num_tensors,
        fields=MappingProxyType(fields),
        field_types=MappingProxyType(field_types),
        array_types=MappingProxyType(array_types),
    )


def read_gguf_metadata(path: str | Path) -> GGUFMetadata:
    """Read the metadata of the GGUF file at ``path`` (memory-mapped; tensors untouched).

    Raises :class:`~kvroute.errors.TokenizerError` when the file is missing, unreadable,
    not GGUF or truncated.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            if path.stat().st_size == 0:
                raise TokenizerError(f"{path}: not a GGUF file (empty)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return parse_gguf_metadata(buf, source=str(path))
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read GGUF file: {exc.strerror or exc}") from exc


def encode_gguf_metadata(meta: GGUFMetadata) -> bytes:
    """``meta`` as a vocab-only GGUF v3 file: header and key/value section, no tensors.

    llama.cpp uses such files for tokenizer tests; kvroute uses them to rebuild a
    tokenizer with edited metadata. Values are written with the types in
    ``meta.field_types`` / ``meta.array_types``, so ``parse_gguf_metadata`` of the
    result gives back ``meta.fields``.
    """
    out = bytearray(GGUF_MAGIC)
    out += _U32.pack(3)
    out += _U64.pack(0)
    out += _U64.pack(len(meta.fields))
    for key, value in meta.fields.items():
        vtype = meta.field_types[key]
        _put_string(out, key)
        out += _U32.pack(vtype)
        if vtype == GGUFValueType.ARRAY:
            _put_array(out, meta.array_types[key], value)
        else:
            _put_value(out, vtype, value)
    return bytes(out)


def _put_string(out: bytearray, text: str) -> None:
    data = text.encode("utf-8", errors="surrogateescape")
    out += _U64.pack(len(data))
    out += data


def _put_value(out: bytearray, vtype: GGUFValueType, value: GGUFValue) -> None:
    if vtype == GGUFValueType.STRING:
        _put_string(out, cast(str, value))
    else:
        out += struct.pack(_SCALAR_FORMATS[vtype], value)


def _put_array(out: bytearray, elem_type: GGUFValueType, values: GGUFValue) -> None:
    items = cast(list[Any], values)
    out += _U32.pack(elem_type)
    out += _U64.pack(len(items))
    if elem_type in _NUMPY_DTYPES:
        out += np.asarray(items).astype(_NUMPY_DTYPES[elem_type]).tobytes()
    else:
        # Nested arrays carry no element type of their own here; they are not supported.
        if elem_type == GGUFValueType.ARRAY:
            raise TokenizerError("writing nested GGUF arrays is not supported")
        for item in items:
            _put_string(out, item)
