"""HTTP/2 on the wire for the engine's client (``h2.py``): frames, HPACK blocks, header checks.

The engine's HTTP/2 connections make and read their frames themselves (RFC 9113
§4, §6): a request costs one ``struct.pack`` and a cached header block, a response
a few slices. HPACK decoding is the ``hpack`` library (python-hyper), behind a
cache of whole blocks (below).

* **Request header blocks** (RFC 7541) use no dynamic table: the first block of a
  connection sets its size to 0 (a dynamic table size update, §6.3), then every
  field is a static-table index or a literal *without indexing* (never indexed for
  credentials and cookies). So a block depends on nothing but its fields: the
  fields of a prepared request (method, URL, user headers) are encoded once, with
  Huffman coding, and reused on every connection; the fields that change per
  request (``traceparent``, ``cookie``, ``content-length``) are appended as plain
  literals. The server's ``SETTINGS_HEADER_TABLE_SIZE`` never matters.
* **Response header blocks**: a server sends the same fields again and again,
  and HPACK is deterministic: a block decoded against a given dynamic table gives
  the same fields and makes the same additions to the table. Decoded blocks are
  kept under (bytes, table content), for all connections; a hit replays the additions.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import hpack.exceptions
import hpack.hpack
import hpack.table
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
MAX_WINDOW = (1 << 31) - 1
DEFAULT_WINDOW = 65535
DEFAULT_FRAME = 16384  # SETTINGS_MAX_FRAME_SIZE's initial value: what we accept, and send until told more
# SETTINGS identifiers (RFC 9113 §6.5.2)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = (
    range(1, 7)
)
ERROR_NAMES = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = (
    0,
    1,
    3,
    6,
    7,
    8,
    9,
)

HEAD = struct.Struct(">IBI")  # (length << 8 | type, flags, stream id): a frame's 9-byte header
U32 = struct.Struct(">I")
U32X2 = struct.Struct(">II")
SETTING = struct.Struct(">HI")
ENABLE_CONNECT_PROTOCOL = 8  # RFC 8441


def code_name(code: int) -> str:
    return ERROR_NAMES[code] if 0 <= code < len(ERROR_NAMES) else f"error code {code}"


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(len(payload) << 8 | kind, flags, stream_id) + payload


def settings_frame(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(SETTING.pack(k, v) for k, v in values.items()))


def window_update(stream_id: int, increment: int) -> bytes:
    return HEAD.pack(4 << 8 | WINDOW_UPDATE, 0, stream_id) + U32.pack(increment)


def rst_stream(stream_id: int, code: int) -> bytes:
    return HEAD.pack(4 << 8 | RST_STREAM, 0, stream_id) + U32.pack(code)


def goaway(last_stream_id: int, code: int) -> bytes:
    return HEAD.pack(8 << 8 | GOAWAY, 0, 0) + U32X2.pack(last_stream_id, code)


def headers_frames(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """HEADERS (and CONTINUATION frames when the block is larger than the server's frame size)."""
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return HEAD.pack(len(block) << 8 | HEADERS, flags | END_HEADERS, stream_id) + block
    parts = [block[i : i + max_frame] for i in range(0, len(block), max_frame)]
    out = [frame(HEADERS, flags, stream_id, parts[0])]
    for i, part in enumerate(parts[1:], 2):
        out.append(frame(CONTINUATION, END_HEADERS if i == len(parts) else 0, stream_id, part))
    return b"".join(out)


# -- HPACK: request blocks ---------------------------------------------------------------------------------

TABLE_SIZE_ZERO = b"\x20"  # a dynamic table size update to 0: the first thing of a connection's first block
_STATIC = hpack.table.HeaderTable.STATIC_TABLE
_FULL = {}
_NAME = {}
for _i, (_n, _v) in enumerate(_STATIC, 1):
    _FULL.setdefault((_n, _v), _i)
    _NAME.setdefault(_n, _i)
_SECRET = frozenset({b"authorization", b"proxy-authorization", b"cookie"})
_huffman_encode = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH).encode


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 §5.1: ``value`` with an N-bit prefix, ``first`` the bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(data: bytes, huffman: bool) -> bytes:
    if huffman:
        coded = _huffman_encode(data)
        if len(coded) < len(data):
            return _integer(len(coded), 7, 0x80) + coded
    return _integer(len(data), 7, 0) + data


def encode_field(name: bytes, value: bytes, huffman: bool = True) -> bytes:
    """One field without touching the dynamic table (indexed if the static table has it whole)."""
    index = _FULL.get((name, value))
    if index is not None:
        return _integer(index, 7, 0x80)
    first = 0x10 if name in _SECRET else 0x00  # never indexed / without indexing
    index = _NAME.get(name)
    if index is not None:
        return _integer(index, 4, first) + _string(value, huffman)
    return bytes((first,)) + _string(name, huffman) + _string(value, huffman)


def encode_block(fields: list[tuple[bytes, bytes]], huffman: bool = True) -> bytes:
    return b"".join(encode_field(n, v, huffman) for n, v in fields)


_TRACEPARENT = b"\x00\x0btraceparent"  # literal without indexing, new name, plain
_COOKIE = bytes((0x10 | 15, 32 - 15))  # never indexed, static name 32 (cookie)
_CONTENT_LENGTH = bytes((0x0F, 28 - 15))  # without indexing, static name 28 (content-length)


def per_request_fields(tp: bytes, cookie: bytes, content_length: int) -> bytes:
    """The fields that change per request, as plain literals (see the module docstring)."""
    out = b""
    if tp:
        out = _TRACEPARENT + _integer(len(tp), 7, 0) + tp
    if cookie:
        out += _COOKIE + _integer(len(cookie), 7, 0) + cookie
    if content_length:
        n = str(content_length).encode()
        out += _CONTENT_LENGTH + bytes((len(n),)) + n
    return out


# -- HPACK: response blocks ----------------------------------------------------------------------------------

# Servers such as nginx send their response fields as Huffman-coded literals, the same few strings on every
# response, and hpack decodes each bit by bit in Python: the decoded strings are cached (bytes in, bytes out).
_huffman = hpack.hpack.decode_huffman


@functools.lru_cache(maxsize=4096)
def _huffman_cached(data: bytes) -> bytes:
    return _huffman(data)


def _decode_huffman(data: bytes | bytearray | memoryview) -> bytes:
    return _huffman_cached(bytes(data))


hpack.hpack.decode_huffman = _decode_huffman
HPACKError = hpack.exceptions.HPACKError
# Decoded blocks of every connection (the key holds the table's content, so the connections share them: a
# block seen on one connection with an empty table is known to the others); emptied when full.
_BLOCK_CACHE = 512
_BLOCKS: dict[tuple[Any, ...], tuple[Any, list[tuple[bytes, bytes]]]] = {}


class _RecordingTable(hpack.table.HeaderTable):
    """hpack's header table, noting on request what is added to it (a resize makes a block not replayable)."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[tuple[bytes, bytes]] | None = None

    def add(self, name: bytes, value: bytes) -> None:
        if self._maxsize == 0 and not self.dynamic_entries:
            return  # nothing is kept in a table of size 0 (servers that index anyway: nginx)
        if self.added is not None:
            self.added.append((name, value))
        super().add(name, value)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        self.added = None
        hpack.table.HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]


class CachingDecoder(hpack.hpack.Decoder):
    """hpack's decoder behind a cache of whole blocks (see the module docstring)."""

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.header_table = _RecordingTable()
        self._blocks = _BLOCKS

    def decode_cached(self, data: bytes, check: Any) -> Any:
        """``check(fields)`` of the block's fields (raw bytes): computed on a miss, the same on a hit."""
        table = self.header_table
        key = (data, tuple(table.dynamic_entries), table._maxsize, check)  # a response's block or trailers
        hit = self._blocks.get(key)
        if hit is not None:
            result, added = hit
            for name, value in added:
                table.add(name, value)
            return result
        added = table.added = []
        try:
            fields = super().decode(data, raw=True)
        finally:
            replayable = table.added is added
            table.added = None
        result = check(fields)  # raises on fields RFC 9113 forbids: never cached
        if replayable:
            if len(self._blocks) >= _BLOCK_CACHE:
                self._blocks.clear()
            self._blocks[key] = (result, added)
        return result


# -- checks on received fields (RFC 9113 §8.2, §8.3.2) -------------------------------------------------------

_CONNECTION_SPECIFIC = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"})
# Bytes a field's name (and value) must not hold, found by deleting them: ``bytes in bytes`` costs more on CPython
# 3.11 (it first tries its left operand as an integer, and builds the TypeError it then discards).
_BAD_NAME = b": \r\n\x00"
_BAD_VALUE = b"\r\n\x00"


class MalformedHeaders(ValueError):
    """A header block that RFC 9113 §8.2 forbids."""


def check_response(fields: list[tuple[bytes, bytes]]) -> tuple[int, tuple[tuple[str, str], ...], Any, int]:
    """(status, regular fields decoded as latin-1, the same as a dict when no name repeats, content-length: -1
    if none, -2 if not a number) of a response's header block; raises ``MalformedHeaders``."""
    status = 0
    regular: list[tuple[str, str]] = []
    for name, value in fields:
        if name[:1] == b":":
            if name != b":status" or status or regular:
                raise MalformedHeaders(f"pseudo-header field {name!r} not allowed here")
            if len(value) != 3 or not value.isdigit():
                raise MalformedHeaders(f"bad :status {value!r}")
            status = int(value)
            continue
        _check_field(name, value)
        regular.append((name.decode("latin-1"), value.decode("latin-1")))
    if not status:
        raise MalformedHeaders("response without :status")
    simple = dict(regular)
    if len(simple) != len(regular):
        return status, tuple(regular), None, -1  # a repeated name: content-length is read from the Headers
    length = simple.get("content-length")
    return status, tuple(regular), simple, -1 if length is None else int(length) if length.isdigit() else -2


def check_trailers(fields: list[tuple[bytes, bytes]]) -> tuple[int, tuple[tuple[str, str], ...], Any, int]:
    for name, value in fields:
        if name[:1] == b":":
            raise MalformedHeaders(f"pseudo-header field {name!r} in trailers")
        _check_field(name, value)
    return 0, (), None, -1


def _check_field(name: bytes, value: bytes) -> None:
    if not name or name.lower() != name or len(name.translate(None, _BAD_NAME)) != len(name):
        raise MalformedHeaders(f"bad field name {name!r}")
    if name in _CONNECTION_SPECIFIC or (name == b"te" and value != b"trailers"):
        raise MalformedHeaders(f"connection-specific field {name!r}")
    if (
        len(value.translate(None, _BAD_VALUE)) != len(value)
        or value[:1] in (b" ", b"\t")
        or value[-1:] in (b" ", b"\t")
    ):
        raise MalformedHeaders(f"bad value of {name!r}")
