"""Parquet as a source, end to end: tables written with pyarrow from `make-sample`'s
dataset, read by the real binary from local disk and from moto's S3 server."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from e2e_util import read_report, run_headrace, write_config

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS_PER_GROUP = 16
SAMPLES = 96
FILES = 2
BUCKET = "headrace-parquet"


def manifest_rows(dataset: Path):
    return [json.loads(line) for line in (dataset / "manifest.jsonl").read_text().splitlines()]


def write_parquet(dataset: Path, out: Path, rows=None, image=None, extra=None, files=FILES,
                  rows_per_group=ROWS_PER_GROUP):
    """The manifest's samples as `files` Parquet files: id, image bytes, conversations as
    JSON (what Hugging Face LLaVA-style tables hold), in manifest order. `image(i, bytes)`
    may replace a cell; `extra` adds columns (name -> list over all rows)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else manifest_rows(dataset)
    per = -(-len(rows) // files)
    names = []
    for f in range(files):
        lo, hi = f * per, min(len(rows), (f + 1) * per)
        images = []
        for i in range(lo, hi):
            data = (dataset / rows[i]["image"]).read_bytes()
            images.append(image(i, data) if image else data)
        columns = {
            "id": [r["id"] for r in rows[lo:hi]],
            "image": pa.array(images, type=pa.binary()),
            "conversations": [json.dumps(r["conversations"]) for r in rows[lo:hi]],
        }
        for name, values in (extra or {}).items():
            columns[name] = values[lo:hi]
        name = out / f"part-{f:05d}.parquet"
        pq.write_table(pa.table(columns), name, row_group_size=rows_per_group)
        names.append(name)
    return names


def pattern(folder, files=FILES):
    return str(folder / f"part-{{00000..{files - 1:05d}}}.parquet")


def parquet_config(path: Path, dataset: Path, source: str, extra: str = "", **overrides):
    config = write_config(path, dataset, extra=extra, **overrides)
    text = config.read_text().replace(f"manifest: {dataset / 'manifest.jsonl'}",
                                      f"parquet: \"{source}\"")
    config.write_text(text)
    return config


def run(binary, config, report, *args, check=True, env=None):
    proc = run_headrace(binary, "run", config, "--report", report, "--digests", "--quiet", *args,
                        check=check, env=env)
    return proc, (read_report(report) if report.exists() else None)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, headrace_bin):
    out = tmp_path_factory.mktemp("pq-sample")
    run_headrace(headrace_bin, "make-sample", "--out", out, "--samples", SAMPLES, "--seed", 3,
                 "--size", "96x72")
    return out


@pytest.fixture(scope="module")
def tables(dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("pq")
    write_parquet(dataset, out)
    return out


def test_unshuffled_parquet_yields_the_manifests_batches_byte_for_byte(
        dataset, tables, headrace_bin, tmp_path):
    flags = ["--set", "shuffle=false", "--set", "epochs=2"]
    manifest = write_config(tmp_path / "m.yaml", dataset)
    _, m = run(headrace_bin, manifest, tmp_path / "m.json", *flags)
    parquet = parquet_config(tmp_path / "p.yaml", dataset, pattern(tables))
    _, p = run(headrace_bin, parquet, tmp_path / "p.json", *flags)
    assert p["errors"]["total"] == 0
    assert p["samples"] == m["samples"] == 2 * SAMPLES
    assert p["batch_digests"] == m["batch_digests"]
    assert p["source"].startswith("parquet ") and "6 row groups" in p["source"]
    cache = p["row_group_cache"]
    # Each row group read and decoded once per epoch (the cache lets a group go when all
    # its rows are done).
    assert cache["fetches"] == 2 * SAMPLES // ROWS_PER_GROUP
    assert cache["decodes"] == cache["fetches"]
    assert cache["refetches"] == 0
    assert 0 < cache["peak_bytes"] <= cache["capacity_bytes"]


def test_shuffled_runs_are_deterministic_and_resume_exactly(dataset, tables, headrace_bin,
                                                            tmp_path):
    config = parquet_config(tmp_path / "p.yaml", dataset, pattern(tables),
                            extra="shuffle: true")
    flags = ["--set", "epochs=2", "--set", "source.shuffle_window=2"]
    _, full = run(headrace_bin, config, tmp_path / "full.json", *flags)
    _, again = run(headrace_bin, config, tmp_path / "again.json", *flags,
                   "--set", "execution.cpu_threads=1")
    assert full["batch_digests"] == again["batch_digests"]
    _, ordered = run(headrace_bin, config, tmp_path / "ordered.json", *flags,
                     "--set", "shuffle=false")
    assert full["batch_digests"] != ordered["batch_digests"]
    per_epoch = SAMPLES // 8
    for k in (5, per_epoch + 3):  # mid first epoch, mid second
        _, resumed = run(headrace_bin, config, tmp_path / f"from{k}.json", *flags,
                         "--start-batch", k)
        assert resumed["batch_digests"] == full["batch_digests"][k:]


def test_scalar_and_text_columns_reach_the_batch(dataset, headrace_bin, tmp_path):
    rows = manifest_rows(dataset)
    labels = [i % 5 for i in range(len(rows))]
    a = write_parquet(dataset, tmp_path / "a", extra={"label": labels,
                                                      "caption": [f"c{i}" for i in range(len(rows))]})
    b = write_parquet(dataset, tmp_path / "b", extra={"label": [x + 1 for x in labels],
                                                      "caption": [f"c{i}" for i in range(len(rows))]})
    digests = []
    for folder in (a[0].parent, b[0].parent):
        config = parquet_config(tmp_path / f"{folder.name}.yaml", dataset, pattern(folder),
                                extra="shuffle: false")
        proc = run_headrace(headrace_bin, "run", config, "--print-config", "--digests", "--quiet",
                            "--report", tmp_path / f"{folder.name}.json")
        digests.append(read_report(tmp_path / f"{folder.name}.json")["batch_digests"])
    # The label column is a batch tensor: other labels, other batches.
    assert digests[0] != digests[1]


def test_a_null_image_and_a_corrupt_image_fail_only_their_samples(dataset, headrace_bin,
                                                                   tmp_path):
    def image(i, data):
        # Row 70: a JPEG cut off halfway.
        return None if i == 5 else data[:len(data) // 2] if i == 70 else data
    write_parquet(dataset, tmp_path / "bad", image=image)
    config = parquet_config(tmp_path / "p.yaml", dataset, pattern(tmp_path / "bad"),
                            extra="shuffle: false\nerrors: {max_error_rate: 0.5}")
    _, r = run(headrace_bin, config, tmp_path / "r.json")
    assert r["samples"] == SAMPLES - 2
    assert r["errors"]["total"] == 2
    first = r["errors"]["first"]
    text = json.dumps(first)
    assert "part-00000.parquet#row 5" in text
    # Row 70 of the dataset is row 22 of the second file.
    assert "part-00001.parquet#row 22" in text
    assert set(r["errors"]["by_kind"]) == {"missing_field", "corrupt_data"}


def test_a_row_group_bigger_than_the_memory_budget_is_an_error_naming_the_sizes(
        dataset, tables, headrace_bin, tmp_path):
    # 16 images of 96x72 are ~40 KB: the row-group cache gets half of a 64 KiB budget.
    config = parquet_config(tmp_path / "p.yaml", dataset, pattern(tables), batch_size=2,
                            extra="shuffle: false")
    proc, _ = run(headrace_bin, config, tmp_path / "r.json", "--set", "memory.budget_bytes=64KiB",
                  "--set", "ops.2.image.center_crop.size=8", "--set", "ops.1.image.resize.shorter_side=8",
                  "--set", "ops.4.text.tokenize.max_length=8", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "resource_exhausted" in proc.stderr
    assert "bytes uncompressed" in proc.stderr and "over the limit of 32768" in proc.stderr
    assert "source.cache_bytes" in proc.stderr and "memory.budget_bytes" in proc.stderr


def test_a_missing_column_names_it_and_the_columns_there(dataset, tables, headrace_bin,
                                                         tmp_path):
    config = parquet_config(
        tmp_path / "p.yaml", dataset, pattern(tables),
        extra="")
    text = config.read_text().replace(
        "parquet: ", "fields: [{name: image, kind: image, key: jpg}, "
        "{name: conversation, kind: conversation, key: conversations}]\n  parquet: ")
    config.write_text(text)
    proc = run_headrace(headrace_bin, "run", config, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "no column 'jpg'" in proc.stderr
    assert "id (string), image (bytes), conversations (string)" in proc.stderr


def test_a_file_that_does_not_exist_is_a_config_error_naming_it(dataset, tables, headrace_bin,
                                                                tmp_path):
    config = parquet_config(tmp_path / "p.yaml", dataset, pattern(tables, files=3))
    proc = run_headrace(headrace_bin, "run", config, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "part-00002.parquet" in proc.stderr and "does not exist" in proc.stderr


def test_parquet_on_s3_reads_one_request_per_row_group_plus_footers(
        moto_s3, dataset, tables, headrace_bin, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = moto_s3.env(home)
    subprocess.run([str(headrace_bin), "upload", str(tables), f"s3://{BUCKET}/train/",
                    "--create-bucket"], env=env, check=True, capture_output=True)
    config = parquet_config(tmp_path / "p.yaml", dataset,
                            f"s3://{BUCKET}/train/part-{{00000..{FILES - 1:05d}}}.parquet",
                            extra="shuffle: false")
    _, r = run(headrace_bin, config, tmp_path / "s3.json", env=env)
    local_config = parquet_config(tmp_path / "l.yaml", dataset, pattern(tables),
                                  extra="shuffle: false")
    _, local = run(headrace_bin, local_config, tmp_path / "l.json")
    assert r["batch_digests"] == local["batch_digests"]
    s3 = r["storage"]["s3"]
    groups = SAMPLES // ROWS_PER_GROUP
    # Per file: a size probe and one tail read; then one ranged GET per row group.
    assert s3["requests"] <= groups + 2 * FILES, s3
    assert r["row_group_cache"]["fetches"] == groups
    assert groups / SAMPLES == 1 / ROWS_PER_GROUP
    print(f"s3 requests: {s3['requests']} for {SAMPLES} samples "
          f"({s3['requests'] / SAMPLES:.4f} per sample; row groups alone {groups / SAMPLES:.4f})")


# --- Path/URL columns and list columns (source.fields with max_items) ---

import numpy as np  # noqa: E402

import list_dataset as ld  # noqa: E402


def test_a_path_column_reads_the_files_it_names_like_the_manifest(dataset, tmp_path):
    """A string column of a media field holds paths, resolved against source.root: the
    images equal the manifest's. A path that leaves the root is its sample's path_escape,
    a null path in a required field its missing_field; nothing else is lost."""
    import headrace
    recs = ld.records(dataset)
    recs = [r if i != 4 else r[:4] + ("../outside.jpg",) for i, r in enumerate(recs)]
    pattern = ld.write_parquet(dataset, tmp_path / "p", recs=recs)
    ops = headrace.ops

    def images(source, **kw):
        p = headrace.Pipeline(source=source, ops=[ops.decode(), ops.resize(width=24, height=24),
                                                  ops.normalize()],
                              batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB",
                              shuffle=False, overrides={"errors.max_error_rate": 0.5})
        rows, errors = {}, []
        with headrace.Loader(p) as loader:
            for batch in loader:
                errors += batch.errors
                for row, index in enumerate(np.asarray(batch["index"])):
                    rows[int(index)] = np.asarray(batch["image"])[row].copy()
        return rows, errors

    want, errors = images(dataset / "manifest.jsonl")
    assert errors == [] and len(want) == SAMPLES
    got, errors = images({"parquet": pattern, "root": dataset,
                          "fields": [{"name": "image", "kind": "image", "key": "image_path",
                                      "required": True}]})
    assert sorted(got) == [i for i in range(SAMPLES) if i != 4]
    for i, image in got.items():
        assert np.array_equal(image, want[i]), i
    assert len(errors) == 1 and "index 4," in errors[0] and "path_escape" in errors[0], errors
    assert "part-00000.parquet#row 4" in errors[0] and "column 'image_path'" in errors[0]


def test_bad_list_cells_fail_only_their_samples_each_named(dataset, tmp_path):
    """list<binary> and list<struct<bytes, path>> views: a fourth item (max_items 3), a
    null item, a corrupt item; a null list is an empty one. Each bad row is one named
    error, the rest match the manifest's arrays."""
    def views(i, data):
        if i == 3:
            return data + [data[0]]  # 4 items
        if i == 5:
            return data + [None]  # item 1 is null
        if i == 8:
            return None  # a null list: no views, no error
        if i == 10:
            return [data[0], b"\xff\xd8\xff not a jpeg"]
        return data

    pattern = ld.write_parquet(dataset, tmp_path / "p", views=views)
    want, errors = ld.collect({"manifest": ld.write_manifest(dataset, tmp_path / "m"),
                               "fields": ld.MANIFEST_FIELDS, "allow_absolute_paths": True,
                               "root": "/"})
    assert errors == []
    keep = [i for i in range(SAMPLES) if i not in (3, 5, 10)]
    for column in ("views", "hf_views"):
        got, errors = ld.collect({"parquet": pattern, "fields": ld.parquet_fields(column)})
        assert list(got["index"]) == keep, column
        assert len(errors) == 3, (column, errors)
        named = {i: [e for e in errors if f"index {i}," in e] for i in (3, 5, 10)}
        assert all(len(v) == 1 for v in named.values()), errors
        assert (f"column '{column}' has 4 items, more than its max_items 3" in named[3][0]
                and "bad_record" in named[3][0])
        assert f"column '{column}' item 1 is null" in named[5][0]
        assert "part-00000.parquet#row 5" in named[5][0]
        assert "views[1]" in named[10][0] and "corrupt" in named[10][0]
        assert got["views_count"][keep.index(8)] == 0
        for field in ("views", "views_count", "label"):
            assert np.array_equal(got[field], want[field][keep]), (column, field)


def test_a_list_column_needs_a_list_field(dataset, tmp_path):
    import headrace
    pattern = ld.write_parquet(dataset, tmp_path / "p")
    fields = ld.parquet_fields("views")
    fields[0] = dict(fields[0], max_items=0, pad_items=False)
    with pytest.raises(headrace.Error, match="column 'views' holds list<element: binary>, a list"):
        ld.collect({"parquet": pattern, "fields": fields})


def test_a_url_column_on_s3_gives_the_local_paths_batches(moto_s3, dataset, headrace_bin,
                                                          tmp_path):
    """image_path and view_paths as s3:// URLs (allow_absolute_paths, root the bucket's
    prefix) read from moto give the batches of the same columns as local relative paths."""
    home = tmp_path / "home"
    home.mkdir()
    env = moto_s3.env(home)
    subprocess.run([str(headrace_bin), "upload", str(dataset / "images"),
                    f"s3://{BUCKET}/urls/images/", "--create-bucket"],
                   env=env, check=True, capture_output=True)
    url = f"s3://{BUCKET}/urls/"
    local = ld.write_parquet(dataset, tmp_path / "local")
    remote = ld.write_parquet(dataset, tmp_path / "remote", prefix=url)
    digests = []
    for name, pattern, root in (("local", local, dataset), ("remote", remote, url)):
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"""
source:
  parquet: "{pattern}"
  root: "{root}"
  allow_absolute_paths: true
  fields:
    - {{name: image, kind: image, key: image_path, required: true}}
    - {{name: views, kind: image, key: view_paths, max_items: {ld.MAX_VIEWS}}}
shuffle: false
seed: 1
batch: {{size: 8}}
ops:
  - image.decode: {{}}
  - image.resize: {{width: 24, height: 24}}
  - image.normalize: {{}}
  - image.decode: {{field: views}}
  - image.resize: {{width: 24, height: 24, field: views}}
  - image.normalize: {{field: views}}
execution: {{cpu_threads: 2}}
memory: {{budget_bytes: 64MiB}}
trainer: {{step_ms: 0}}
""")
        _, r = run(headrace_bin, config, tmp_path / f"{name}.json", env=env)
        assert r["errors"]["total"] == 0 and r["samples"] == SAMPLES, r["errors"]
        digests.append(r["batch_digests"])
        if name == "remote":  # every image and view read from moto, one GET each
            views = sum(i % (ld.MAX_VIEWS + 1) for i in range(SAMPLES))
            assert r["storage"]["s3"]["requests"] >= SAMPLES + views, r["storage"]
    assert digests[0] == digests[1]


# --- Damaged files: skipped whole, counted once, named (issue 26) ---

import hostile_files as hostile  # noqa: E402


def test_damaged_parquet_files_are_skipped_whole_counted_once_and_named(dataset, headrace_bin,
                                                                       tmp_path):
    folder = tmp_path / "d"
    good = write_parquet(dataset, folder)
    data = good[0].read_bytes()
    one_group = pa.BufferOutputStream()  # a consistent lie needs the file's rows to add up
    pq.write_table(pq.read_table(good[0]), one_group, row_group_size=1 << 20)
    single = one_group.getvalue().to_pybytes()
    damaged = {  # each its own way of lying, after the two good files
        2: hostile.parquet_footer_length(data),
        3: hostile.parquet_pages_past_the_end(data),
        4: hostile.parquet_lying_rows(data, 1 << 31),
        5: hostile.parquet_lying_rows(data, 1 << 40),
        6: hostile.parquet_lying_rows(single, 1 << 31, values_too=True),
        7: hostile.parquet_lying_rows(single, 1 << 40, values_too=True),
    }
    for f, bytes_ in damaged.items():
        (folder / f"part-{f:05d}.parquet").write_bytes(bytes_)
    config = parquet_config(tmp_path / "p.yaml", dataset, pattern(folder, 8),
                            extra="shuffle: false\nerrors: {max_error_rate: 0.5}")
    proc, r = run(headrace_bin, config, tmp_path / "r.json")
    assert r["samples"] == SAMPLES
    errors = r["errors"]
    assert errors["by_kind"] == {"shard_error": 6}, errors
    named = [(e["index"], e["uri"], e["kind"]) for e in errors["first"]]
    assert named == [(f, str(folder / f"part-{f:05d}.parquet"), "shard_error")
                     for f in damaged], named
    reasons = [e["reason"] for e in errors["first"]]
    assert "declares 2147483648 rows" in reasons[2] and "1099511627776" in reasons[3], reasons
    assert all("source.cache_bytes" in reason for reason in reasons[4:]), reasons
    # The good files give the batches they give alone.
    alone = parquet_config(tmp_path / "g.yaml", dataset, pattern(folder), extra="shuffle: false")
    _, reference = run(headrace_bin, alone, tmp_path / "g.json")
    assert r["batch_digests"] == reference["batch_digests"]
    # Asked to, the first damaged file fails the run before any batch, naming it.
    fail = parquet_config(tmp_path / "f.yaml", dataset, pattern(folder, 8),
                          extra="errors: {on_bad_shard: fail}")
    proc, _ = run(headrace_bin, fail, tmp_path / "f.json", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "part-00002.parquet" in proc.stderr and "on_bad_shard" in proc.stderr, proc.stderr


def test_without_pyarrow_only_a_parquet_source_fails_and_it_says_what_to_install(
        dataset, tables, headrace_bin, tmp_path):
    # The engine links no Arrow: it loads pyarrow's libarrow through a bridge when a
    # Parquet footer is first read (src/headrace/formats/arrow_bridge.h).
    env = {**os.environ, "HEADRACE_PYARROW_DIR": str(tmp_path / "no-pyarrow-here")}
    manifest = write_config(tmp_path / "m.yaml", dataset)
    _, m = run(headrace_bin, manifest, tmp_path / "m.json", env=env)
    assert m["samples"] == SAMPLES and m["errors"]["total"] == 0
    parquet = parquet_config(tmp_path / "p.yaml", dataset, pattern(tables))
    proc = run_headrace(headrace_bin, "run", parquet, check=False, env=env)
    assert proc.returncode != 0
    assert "source.parquet: Parquet needs pyarrow's Arrow C++ library: no pyarrow found" \
        in proc.stderr, proc.stderr
    assert str(tmp_path / "no-pyarrow-here") in proc.stderr
    assert "pip install 'pyarrow>=" in proc.stderr
