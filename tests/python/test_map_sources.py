"""What a Python `map` sees (issue 26): the sample's turns on every source kind, and an
image with its own channel count."""
import io
import json
import tarfile

import numpy as np
import pytest

import headrace

ops = headrace.ops
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def manifest_rows(dataset):
    return [json.loads(line) for line in (dataset / "manifest.jsonl").read_text().splitlines()]


def write_shards(dataset, out):
    """The manifest's samples as two WebDataset shards: <key>.jpg and <key>.json."""
    out.mkdir(exist_ok=True)
    rows = manifest_rows(dataset)
    half = len(rows) // 2
    for s, part in enumerate((rows[:half], rows[half:])):
        with tarfile.open(out / f"s-{s}.tar", "w") as tar:
            for r in part:
                for ext, data in (("jpg", (dataset / r["image"]).read_bytes()),
                                  ("json", json.dumps({"conversations": r["conversations"]})
                                   .encode())):
                    info = tarfile.TarInfo(f"{r['id']}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return {"shards": str(out / "s-{0..1}.tar")}


def write_parquet(dataset, out):
    out.mkdir(exist_ok=True)
    rows = manifest_rows(dataset)
    pq.write_table(pa.table({
        "id": [r["id"] for r in rows],
        "image": pa.array([(dataset / r["image"]).read_bytes() for r in rows], type=pa.binary()),
        "conversations": [json.dumps(r["conversations"]) for r in rows],
    }), out / "p.parquet", row_group_size=16)
    return {"parquet": str(out / "p.parquet")}


def turn_counts(sample):
    turns = sample["turns"]
    assistant = sum(1 for role, _ in turns if role == "assistant")
    return {"turns": len(turns), "assistant_chars": sum(len(t) for r, t in turns
                                                         if r == "assistant"), "n": assistant}


OUTPUTS = {"turns": ("i64", []), "assistant_chars": ("i64", []), "n": ("i64", [])}


def per_sample(source):
    pipeline = headrace.Pipeline(source=source, ops=[ops.map(turn_counts, OUTPUTS)],
                                 batch_size=8, shuffle=False, cpu_threads=2, epochs=1)
    out = {}
    with headrace.Loader(pipeline) as loader:
        for batch in loader:
            for row, index in enumerate(np.asarray(batch["index"])):
                out[int(index)] = tuple(int(np.asarray(batch[k])[row]) for k in OUTPUTS)
    return out


@pytest.mark.parametrize("kind", ["shards", "parquet"])
def test_a_map_sees_the_same_turns_on_every_source_kind(py_sample, tmp_path, kind):
    want = per_sample(py_sample / "manifest.jsonl")
    assert len(want) == 48 and all(t > 0 for t, _, _ in want.values())
    source = (write_shards if kind == "shards" else write_parquet)(py_sample, tmp_path / kind)
    assert per_sample(source) == want


def pixels_of(sample):
    image = sample["image"]
    assert image.dtype == np.uint8
    # A pixel's channels lie inside the pixel (an RGBX pixel is 4 bytes, its view 3): no
    # view reads into the next pixel or past the row.
    assert image.strides[2] == 1 and image.strides[1] >= image.shape[2]
    out = np.zeros((32, 32, 3), dtype=np.uint8)
    out[:, :, :image.shape[2]] = image
    return {"shape": np.array(image.shape, dtype=np.int64), "pixels": out}


def views(py_sample, *colour_ops):
    pipeline = headrace.Pipeline(
        source=py_sample / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=40), ops.center_crop(32), *colour_ops,
             ops.map(pixels_of, {"shape": ("i64", [3]), "pixels": ("u8", [32, 32, 3])})],
        batch_size=8, shuffle=False, cpu_threads=2, epochs=1)
    with headrace.Loader(pipeline) as loader:
        batch = next(iter(loader))
    return np.asarray(batch["shape"]), np.asarray(batch["pixels"])


def test_a_map_after_grayscale_sees_one_channel_with_the_grey_pixels(py_sample):
    shapes, grey = views(py_sample, ops.grayscale(num_output_channels=1, p=1.0))
    assert (shapes == [32, 32, 1]).all(), shapes
    rgb_shapes, rgb = views(py_sample)
    assert (rgb_shapes == [32, 32, 3]).all()
    # The grey the engine computed (ITU-R 601 luma, adjust.h's Gray601) from the same pixels.
    r, g, b = (rgb[..., c].astype(np.uint32) for c in range(3))
    want = ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)
    assert (grey[..., 0] == want).all()
    assert not grey[..., 1:].any()  # nothing beyond the one channel was visible
