"""source.records: a JSONL manifest kept as lines (mapped, parsed per sample) gives the
batches, errors and resume points of the parsed manifest, in a fraction of its memory."""
import hashlib
import shutil

import numpy as np
import pytest

import headrace

from conftest import small_pipeline


def run(loader, epochs):
    """Each batch's digest, every error message, and the report's memory figures (taken
    while the engine runs)."""
    out, errors, memory = [], [], None
    for _ in range(epochs):
        for batch in loader:
            h = hashlib.sha256()
            for name in sorted(batch):
                value = batch[name]
                h.update(name.encode())
                h.update(repr(value).encode() if isinstance(value, list)
                         else np.asarray(value).tobytes())
            out.append((batch.epoch, batch.index, h.hexdigest()))
            errors.extend(batch.errors)
            if memory is None:
                memory = loader.report()["memory"]
    return out, errors, memory


@pytest.fixture
def hostile_dataset(py_sample, tmp_path):
    """The shared dataset with blank lines, a CRLF line, a broken line and a line whose
    image is missing: errors must name the same line numbers and URIs in both forms."""
    for src in py_sample.iterdir():
        if src.name != "manifest.jsonl":
            (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / src.name)
    lines = (py_sample / "manifest.jsonl").read_text().splitlines()
    lines[3] = lines[3] + "\r"
    lines.insert(5, "")
    lines.insert(9, "{not json")
    missing = next(i for i in range(10, len(lines)) if '"images/' in lines[i])
    lines[missing] = lines[missing].replace('"images/', '"images/missing-')
    (tmp_path / "manifest.jsonl").write_text("\n\n".join(lines[:2]) + "\n" +
                                             "\n".join(lines[2:]))
    return tmp_path


def test_lines_give_the_parsed_manifests_batches_and_errors(hostile_dataset):
    runs = {}
    for form in ("parsed", "lines"):
        pipeline = small_pipeline(hostile_dataset, epochs=2,
                                  overrides={"source.records": form})
        loader = headrace.Loader(pipeline)
        runs[form] = run(loader, 2)
        loader.close()
    (parsed, parsed_errors, parsed_memory) = runs["parsed"]
    (lines, lines_errors, lines_memory) = runs["lines"]
    assert len(parsed) == 2 * 7  # 49 records (48 + the broken line), batch 8
    assert lines == parsed
    assert sorted(lines_errors) == sorted(parsed_errors)
    assert len(parsed_errors) == 4  # the broken line and the missing image, each epoch
    assert sum("line 11:" in e for e in parsed_errors) == 2  # blank lines are counted
    assert sum("missing-" in e for e in parsed_errors) == 2
    # Lines: 4 bytes of offsets a record on the heap, the text mapped from the page cache.
    size = (hostile_dataset / "manifest.jsonl").stat().st_size
    assert lines_memory["manifest_mapped_bytes"] == size
    assert parsed_memory["manifest_mapped_bytes"] == 0
    assert lines_memory["manifest_bytes"] < 8 * 49 + 4096 < parsed_memory["manifest_bytes"]


def test_a_state_taken_on_parsed_records_resumes_on_lines(make_pipeline):
    parsed = headrace.Loader(make_pipeline(epochs=1, overrides={"source.records": "parsed"}))
    it = iter(parsed)
    next(it)
    state = parsed.state_dict()
    want = digests_of_rest(it)
    assert len(want) == 5  # 48 samples, batch 8: the batches after the first
    parsed.close()
    lines = headrace.Loader(make_pipeline(epochs=1, overrides={"source.records": "lines"}),
                            state_dict=state)
    assert digests_of_rest(iter(lines)) == want
    lines.close()


def digests_of_rest(it):
    """The rest of the epoch a ``next(it)`` started (a new ``for`` would be the next one)."""
    out = []
    while True:
        try:
            b = next(it)
        except StopIteration:
            return out
        out.append((b.epoch, b.index, hashlib.sha256(np.asarray(b["image"]).tobytes()).hexdigest()))


def test_records_on_a_shard_source_is_a_config_error(py_sample):
    with pytest.raises(headrace.ConfigError, match="source.records"):
        headrace.Pipeline(source={"shards": str(py_sample / "s-{0..1}.tar"), "records": "lines"},
                          ops=[]).validate()
