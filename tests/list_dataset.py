"""One dataset with a list of images per sample, written three ways from `make-sample`'s
images: a JSONL manifest, WebDataset tar shards (`KEY.N.jpg` items, `KEY.json`,
`KEY.cls`) and Parquet files (pyarrow), for the tests that compare the sources through
the Python API. Record i has i % 4 views (0 to MAX_VIEWS): the images of records
i + 1, ..., i + k (mod n); its label is i % 7."""
import io
import json
import tarfile
from pathlib import Path

import numpy as np

MAX_VIEWS = 3
PER_FILE = 16  # samples per shard, rows per row group and per Parquet file: 16


def records(sample: Path):
    """(id, [view paths relative to `sample`], conversations, label, own image path) per
    manifest line."""
    rows = [json.loads(line) for line in (sample / "manifest.jsonl").read_text().splitlines()]
    n = len(rows)
    return [(r["id"], [rows[(i + k + 1) % n]["image"] for k in range(i % (MAX_VIEWS + 1))],
             r["conversations"], i % 7, r["image"]) for i, r in enumerate(rows)]


def write_manifest(sample: Path, out: Path, recs=None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "manifest.jsonl", "w") as f:
        for rid, views, conv, label, _ in recs or records(sample):
            f.write(json.dumps({"id": rid, "views": [str(sample / v) for v in views],
                                "conversations": conv, "label": label}) + "\n")
    return out / "manifest.jsonl"


def write_shards(sample: Path, out: Path, recs=None, members=None) -> str:
    """Tar shards of PER_FILE samples, no index (scanned at load). `members(i, list)` may
    edit record i's (name, bytes) members. Returns the brace pattern."""
    out.mkdir(parents=True, exist_ok=True)
    recs = recs or records(sample)
    shards = -(-len(recs) // PER_FILE)
    for s in range(shards):
        with tarfile.open(out / f"shard-{s:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s * PER_FILE, min(len(recs), (s + 1) * PER_FILE)):
                rid, views, conv, label, _ = recs[i]
                items = [(f"{rid}.{k}.jpg", (sample / v).read_bytes()) for k, v in enumerate(views)]
                items += [(f"{rid}.json", json.dumps({"conversations": conv}).encode()),
                          (f"{rid}.cls", f"{label}\n".encode())]
                if members:
                    items = members(i, items)
                for name, data in items:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return f"{out}/shard-{{000000..{shards - 1:06d}}}.tar"


def write_parquet(sample: Path, out: Path, recs=None, views=None, prefix="") -> str:
    """Parquet files of PER_FILE rows: views list<binary>, hf_views list<struct<bytes,
    path>> (Hugging Face Sequence(Image())), view_paths list<string> (relative to
    `sample`), image_path string, conversations (JSON), label int64. `views(i, list)` may
    replace record i's list of view bytes (None items are nulls); `prefix` goes before
    every path of the path columns (a URL's scheme and bucket). Returns the pattern."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    out.mkdir(parents=True, exist_ok=True)
    recs = recs or records(sample)
    files = -(-len(recs) // PER_FILE)
    hf_type = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    for f in range(files):
        part = list(range(f * PER_FILE, min(len(recs), (f + 1) * PER_FILE)))
        cells = []
        for i in part:
            data = [(sample / v).read_bytes() for v in recs[i][1]]
            cells.append(views(i, data) if views else data)
        table = pa.table({
            "id": [recs[i][0] for i in part],
            "views": pa.array(cells, type=pa.list_(pa.binary())),
            "hf_views": pa.array([None if c is None else
                                  [None if b is None else {"bytes": b, "path": f"{k}.jpg"}
                                   for k, b in enumerate(c)] for c in cells], type=hf_type),
            "view_paths": pa.array([[prefix + v for v in recs[i][1]] for i in part],
                                   type=pa.list_(pa.string())),
            "image_path": [prefix + recs[i][4] for i in part],
            "conversations": [json.dumps(recs[i][2]) for i in part],
            "label": pa.array([recs[i][3] for i in part], type=pa.int64()),
        })
        pq.write_table(table, out / f"part-{f:05d}.parquet")
    return f"{out}/part-{{00000..{files - 1:05d}}}.parquet"


def fields(views_key: str, conversation_key: str, label_key: str):
    # Padded ([B, MAX_VIEWS, ...]): these datasets compare the sources row by row
    # (tests/python/test_ragged.py checks the concatenated layout against this one).
    return [{"name": "views", "kind": "image", "key": views_key, "max_items": MAX_VIEWS,
             "pad_items": True},
            {"name": "conversation", "kind": "conversation", "key": conversation_key},
            {"name": "label", "kind": "int", "key": label_key}]


MANIFEST_FIELDS = fields("views", "conversations", "label")
SHARD_FIELDS = fields("jpg", "json", "cls")


def parquet_fields(views_column="views"):
    return fields(views_column, "conversations", "label")


def collect(source: dict, size=24, **kw):
    """Runs a views pipeline (decode, resize to size x size, normalize: each item) over
    `source` unshuffled; returns ({name: array over all rows}, errors)."""
    import headrace
    ops = headrace.ops
    p = headrace.Pipeline(
        source=source,
        ops=[ops.decode(field="views"), ops.resize(width=size, height=size, field="views"),
             ops.normalize(field="views")],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", shuffle=False,
        overrides={"errors.max_error_rate": 0.5}, **kw)
    out = {"index": [], "views": [], "views_count": [], "label": []}
    errors = []
    with headrace.Loader(p) as loader:
        for batch in loader:
            errors += batch.errors
            for name in out:
                out[name].append(np.asarray(batch[name]).copy())
    return {name: np.concatenate(v) for name, v in out.items()}, errors
