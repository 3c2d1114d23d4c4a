"""Damaged shards and Parquet files for the end-to-end tests: what one bad file among good
ones looks like (issue 26). Each function returns the bytes of a file whose index or
footer lies in one way; the C++ tests build the same kinds (formats/*_test.cc)."""
import json
import struct


def set_footer_i64(data: bytes, path, value: int) -> bytes:
    """A Parquet file whose footer says `value` for every i64 field at `path` (Thrift
    field ids from FileMetaData down, list elements transparent; (3,) the file's rows,
    (4, 3) each row group's rows, (4, 1, 3, 5) each column chunk's values, (4, 1, 3, 9)
    each chunk's first data page), its footer length rewritten to match. The footer is
    Thrift's compact protocol, walked just enough to find the fields."""
    footer_len = struct.unpack("<I", data[-8:-4])[0]
    begin = len(data) - 8 - footer_len
    footer = data[begin:len(data) - 8]
    pos = 0
    hits = []

    def varint():
        nonlocal pos
        v, shift = 0, 0
        while True:
            b = footer[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    def element(kind, at):
        nonlocal pos
        if kind in (1, 2):
            pos += 1
        else:
            value_of(kind, at)

    def value_of(kind, at):
        nonlocal pos
        if kind in (1, 2):
            return
        if kind == 3:
            pos += 1
        elif kind in (4, 5):
            varint()
        elif kind == 6:
            start = pos
            varint()
            if tuple(at) == tuple(path):
                hits.append((start, pos))
        elif kind == 7:
            pos += 8
        elif kind == 8:
            n = varint()
            pos += n
        elif kind in (9, 10):
            header = footer[pos]
            pos += 1
            count = header >> 4
            if count == 15:
                count = varint()
            for _ in range(count):
                element(header & 0x0F, at)
        elif kind == 11:
            count = varint()
            if count:
                types = footer[pos]
                pos += 1
                for _ in range(count):
                    element(types >> 4, at)
                    element(types & 0x0F, at)
        elif kind == 12:
            struct_of(at)
        else:
            raise ValueError(f"thrift type {kind}")

    def struct_of(at):
        nonlocal pos
        last = 0
        while True:
            b = footer[pos]
            pos += 1
            if b == 0:
                return
            delta = b >> 4
            if delta:
                fid = last + delta
            else:
                raw = varint()
                fid = (raw >> 1) ^ -(raw & 1)
            last = fid
            value_of(b & 0x0F, at + [fid])

    struct_of([])
    assert hits, f"no i64 field at {path}"
    zigzag = (value << 1) ^ (value >> 63)
    encoded = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        encoded.append(byte | 0x80 if zigzag else byte)
        if not zigzag:
            break
    out, copied = bytearray(data[:begin]), 0
    for start, end in hits:
        out += footer[copied:start] + encoded
        copied = end
    out += footer[copied:]
    return bytes(out) + struct.pack("<I", len(out) - begin) + b"PAR1"


def parquet_lying_rows(data: bytes, rows: int, values_too: bool = False) -> bytes:
    """Every row group and the file declare `rows` rows; with `values_too`, every column
    chunk as many values (a consistent lie: only the rows' cost gives it away)."""
    if values_too:
        data = set_footer_i64(data, (4, 1, 3, 5), rows)
    return set_footer_i64(set_footer_i64(data, (4, 3), rows), (3,), rows)


def parquet_footer_length(data: bytes, length: int = 0x0FFFFFFF) -> bytes:
    """A footer length longer than the file."""
    return data[:-8] + struct.pack("<I", length) + b"PAR1"


def parquet_pages_past_the_end(data: bytes) -> bytes:
    """Every column chunk's first data page and dictionary page past the file's end."""
    return set_footer_i64(set_footer_i64(data, (4, 1, 3, 9), 1 << 30), (4, 1, 3, 11), 1 << 30)


def index_not_json(index: bytes) -> bytes:
    return index[: len(index) // 2]


def index_version(index: bytes, version: int = 9) -> bytes:
    doc = json.loads(index)
    doc["version"] = version
    return json.dumps(doc).encode()


def index_bytes(index: bytes, value: int) -> bytes:
    doc = json.loads(index)
    doc["bytes"] = value
    return json.dumps(doc).encode()


def index_million_samples(index: bytes, samples: int = 1_000_000) -> bytes:
    """An index that claims `samples` samples inside a terabyte, for a shard of a few KB."""
    doc = json.loads(index)
    head = json.dumps({k: v for k, v in doc.items() if k != "samples"} | {"bytes": 1 << 40})
    entries = ",".join(f'{{"key":"{i:07d}","fields":{{"jpg":[{512 + i * 1024},1]}}}}'
                       for i in range(samples))
    return (head[:-1] + ', "samples": [' + entries + "]}").encode()
