"""WebDataset tar shards as a source, end to end: the same dataset as loose files and as
shards gives byte-identical batches, resume and --start-batch are exact on shards, on a
real S3 implementation (moto) a shard run makes a few large ranged reads (no GET per
member), and bad shards fail per sample or as configuration errors naming what is wrong."""
import io
import json
import shutil
import subprocess
import tarfile

import pytest

from e2e_util import REPO, read_report, run_headrace, write_config

BUCKET = "headrace-shards"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, headrace_bin):
    """96 samples as loose files and as 5-6 tar shards (~150 KB each) with indexes."""
    out = tmp_path_factory.mktemp("sharded")
    run_headrace(headrace_bin, "make-sample", "--out", out, "--samples", 96, "--seed", 3,
                 "--size", "160x120", "--shards", "--shard-size", 150000)
    shards = sorted((out / "shards").glob("shard-*.tar"))
    assert len(shards) >= 3, shards
    return out


def shard_pattern(dataset, count=None):
    n = count if count is not None else len(list((dataset / "shards").glob("shard-*.tar")))
    return f"{dataset}/shards/shard-{{000000..{n - 1:06d}}}.tar"


def shards_config(path, dataset, pattern=None, extra="", source="", **kw):
    """write_config's pipeline over the shards instead of the manifest; `source` adds
    lines under `source:` ("shuffle_window: 2\n")."""
    config = write_config(path, dataset, extra=extra, **kw)
    text = config.read_text().replace(f"manifest: {dataset / 'manifest.jsonl'}",
                                      f"shards: \"{pattern or shard_pattern(dataset)}\"")
    text = text.replace("source:\n", "source:\n" + "".join(
        f"  {line}\n" for line in source.splitlines()))
    config.write_text(text)
    return config


def run(binary, config, tmp_path, name, *args, check=True, env=None):
    report = tmp_path / f"{name}.json"
    proc = run_headrace(binary, "run", config, "--report", report, "--digests", "--quiet",
                        *args, check=check, env=env)
    return (read_report(report) if report.exists() else None), proc


def test_unshuffled_shards_give_the_batches_of_the_manifest(sharded, headrace_bin, tmp_path):
    extra = "shuffle: false"
    manifest, _ = run(headrace_bin, write_config(tmp_path / "m.yaml", sharded, extra=extra),
                      tmp_path, "m")
    shards, _ = run(headrace_bin, shards_config(tmp_path / "s.yaml", sharded, extra=extra),
                    tmp_path, "s")
    assert manifest["samples"] == shards["samples"] == 96
    assert shards["batch_digests"] == manifest["batch_digests"]
    assert shards["source"].startswith("shards ")
    assert "indexed" in shards["source"] and manifest["source"].startswith("manifest ")

    # Without the sidecar indexes the shards are scanned: the same batches.
    scanned_dir = tmp_path / "scanned"
    shutil.copytree(sharded / "shards", scanned_dir)
    for index in scanned_dir.glob("*.idx.json"):
        index.unlink()
    pattern = f"{scanned_dir}/shard-*.tar"  # a local glob
    scanned, _ = run(headrace_bin, shards_config(tmp_path / "g.yaml", sharded, pattern=pattern,
                                                 extra=extra), tmp_path, "g")
    assert scanned["batch_digests"] == manifest["batch_digests"]
    assert "0 indexed" in scanned["source"]


def test_shuffled_shards_resume_exactly_at_any_batch(sharded, headrace_bin, tmp_path):
    config = shards_config(tmp_path / "s.yaml", sharded, source="shuffle_window: 2")
    config.write_text(config.read_text().replace("epochs: 1\n", "epochs: 2\n"))
    full, _ = run(headrace_bin, config, tmp_path, "full")
    assert len(full["batch_digests"]) == 24  # 2 epochs of 12 batches
    # The order is a function of (seed, epoch) only, not of the thread count.
    again, _ = run(headrace_bin, config, tmp_path, "again", "--set", "execution.cpu_threads=1")
    assert again["batch_digests"] == full["batch_digests"]
    for k in (1, 7, 12, 19):
        part, _ = run(headrace_bin, config, tmp_path, f"from{k}", "--start-batch", k)
        assert part["batch_digests"] == full["batch_digests"][k:], k
    other, _ = run(headrace_bin, config, tmp_path, "seed", "--set", "seed=9")
    assert other["batch_digests"] != full["batch_digests"]


def test_python_pipeline_over_shards_resumes_and_splits_ranks(sharded):
    headrace = pytest.importorskip("headrace")
    import numpy as np
    ops = headrace.ops

    def pipeline():
        return headrace.Pipeline(
            source={"shards": shard_pattern(sharded), "shuffle_window": 3},
            ops=[ops.decode(), ops.resize(shorter_side=32), ops.center_crop(32), ops.normalize()],
            batch_size=8, seed=4, epochs=2, cpu_threads=2)

    def indices(batch):
        return [int(i) for i in np.asarray(batch["index"])]

    assert "shards=" in repr(pipeline())
    loader = headrace.Loader(pipeline())
    epoch0 = [indices(b) for b in loader]
    assert sorted(i for b in epoch0 for i in b) == list(range(96))
    # Resume mid-epoch from a state_dict, in a new loader.
    loader = headrace.Loader(pipeline())
    it = iter(loader)
    head = [indices(next(it)) for _ in range(5)]
    state = loader.state_dict()
    resumed = headrace.Loader(pipeline())
    resumed.load_state_dict(state)
    tail = [indices(b) for b in resumed]
    assert head + tail == epoch0
    # Ranks deal the epoch's batches round-robin, as with a manifest.
    rank0 = [indices(b) for b in headrace.Loader(pipeline(), rank=0, world_size=2)]
    rank1 = [indices(b) for b in headrace.Loader(pipeline(), rank=1, world_size=2)]
    assert rank0 == epoch0[0::2] and rank1 == epoch0[1::2]


@pytest.fixture(scope="module")
def realistic(tmp_path_factory, headrace_bin):
    """1200 samples of ~100 KB-class JPEGs (640x480), in shards of 64 MB."""
    out = tmp_path_factory.mktemp("realistic")
    run_headrace(headrace_bin, "make-sample", "--out", out, "--samples", 1200, "--seed", 11,
                 "--size", "640x480", "--shards", "--shard-size", 64 * 1000 * 1000, timeout=600)
    return out


def upload_shards(dataset, moto_s3, headrace_bin, tmp_path, prefix):
    """Uploads dataset's shards to s3://BUCKET/<prefix>/: the environment that reaches
    them, and how many there are."""
    home = tmp_path / "home"
    home.mkdir()
    env = moto_s3.env(home)
    run_headrace(headrace_bin, "upload", dataset / "shards", f"s3://{BUCKET}/{prefix}/",
                 "--create-bucket", env=env)
    return env, len(list((dataset / "shards").glob("shard-*.tar")))


def test_shards_on_s3_are_read_in_blocks_not_per_member(realistic, moto_s3, headrace_bin,
                                                        tmp_path):
    env, n = upload_shards(realistic, moto_s3, headrace_bin, tmp_path, "train")

    def config_for(name, pattern=None):
        config = shards_config(tmp_path / name, realistic, pattern=pattern)
        config.write_text(config.read_text().replace(
            "memory: {budget_bytes: 64MiB}", "memory: {budget_bytes: 1GiB}").replace(
            "execution: {cpu_threads: 2}", "execution: {cpu_threads: 2, io_inflight: 64}"))
        return config

    local, _ = run(headrace_bin, config_for("l.yaml"), tmp_path, "local")
    pattern = f"s3://{BUCKET}/train/shard-{{000000..{n - 1:06d}}}.tar"
    config = config_for("s3.yaml", pattern)
    remote, proc = run(headrace_bin, config, tmp_path, "s3", env=env)
    assert remote["samples"] == 1200, proc.stdout
    assert remote["batch_digests"] == local["batch_digests"]
    s3 = remote["storage"]["s3"]
    assert remote["errors"]["total"] == 0
    cache = remote["block_cache"]
    # Every request is a shard's size (checked against its index), its index or a block:
    # none per member.
    assert s3["requests"] == 2 * n + cache["block_reads"], (s3, cache)
    assert s3["requests"] / remote["samples"] <= 0.01, (s3, cache)
    assert cache["peak_bytes"] <= cache["capacity_bytes"]


def tar_bytes(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sample_members(dataset, key, index, *, jpg=True, json_=True):
    record = json.loads((dataset / "manifest.jsonl").read_text().splitlines()[index])
    out = []
    if jpg:
        out.append((f"{key}.jpg", (dataset / record["image"]).read_bytes()))
    if json_:
        out.append((f"{key}.json", json.dumps(record).encode()))
    return out


def test_bad_shards_fail_per_sample_and_nothing_else_is_lost(sharded, headrace_bin, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    good = [m for i in range(10) for m in sample_members(sharded, f"{i:03d}", i)]
    # shard 0: a .jpg without its .json partner, and a key that comes back later.
    (d / "bad-0.tar").write_bytes(tar_bytes(
        good[:4] + sample_members(sharded, "lonely", 10, json_=False) + good[4:8] +
        sample_members(sharded, "000", 11)))
    # shard 1: its last member cut short.
    whole = tar_bytes(good[8:20])
    last = tarfile.open(fileobj=io.BytesIO(whole)).getmembers()[-1]
    assert last.name == "009.json"
    (d / "bad-1.tar").write_bytes(whole[:last.offset_data + last.size // 2])
    config = shards_config(tmp_path / "bad.yaml", sharded, pattern=f"{d}/bad-{{0..1}}.tar",
                           extra="errors: {max_error_rate: 0.5}\nshuffle: false")
    report, proc = run(headrace_bin, config, tmp_path, "bad")
    # shard 0 (indices 0-5): 000, 001, lonely (bad), 002, 003, 000 again (bad); shard 1
    # (6-11): 004..009, whose .json is cut: 009, the last sample before the damage, is bad
    # (its members may be incomplete).
    errors = report["errors"]
    assert errors["total"] == 3, errors
    assert report["samples"] == 9
    assert errors["by_kind"] == {"bad_record": 1, "corrupt_data": 1, "missing_field": 1}
    named = {(e["index"], e["uri"], e["kind"]) for e in errors["first"]}
    assert named == {(2, f"{d}/bad-0.tar#lonely", "missing_field"),
                     (5, f"{d}/bad-0.tar#000", "bad_record"),
                     (11, f"{d}/bad-1.tar#009", "corrupt_data")}, errors
    corrupt = next(e for e in errors["first"] if e["kind"] == "corrupt_data")
    assert "009.json" in corrupt["reason"], corrupt


# Tar names are bytes. A sample whose name is not UTF-8 is a bad_record, named with each
# invalid byte as U+FFFD: the run report held the raw bytes (json.load refused it) and a
# Python loop died on UnicodeDecodeError at the batch carrying that sample's error.
def test_a_member_name_that_is_not_utf8_is_named_in_valid_text(sharded, headrace_bin, tmp_path):
    d = tmp_path / "names"
    d.mkdir()
    good = [m for i in range(3) for m in sample_members(sharded, f"{i:03d}", i)]
    odd = [(name.replace("003", "b\udcffd"), data)
           for name, data in sample_members(sharded, "003", 3)]
    (d / "names-0.tar").write_bytes(tar_bytes(good + odd))  # tarfile writes the raw byte
    config = shards_config(tmp_path / "names.yaml", sharded, pattern=f"{d}/names-0.tar",
                           extra="errors: {max_error_rate: 0.5}\nshuffle: false")
    report, _ = run(headrace_bin, config, tmp_path, "names")  # strict UTF-8 JSON
    assert report["samples"] == 3
    assert [(e["index"], e["uri"], e["kind"]) for e in report["errors"]["first"]] == [
        (3, f"{d}/names-0.tar#b\ufffdd", "bad_record")], report["errors"]
    headrace = pytest.importorskip("headrace")
    ops = headrace.ops
    loader = headrace.Loader(headrace.Pipeline(
        source={"shards": str(d / "names-0.tar")},
        ops=[ops.decode(), ops.resize(shorter_side=32), ops.center_crop(32), ops.normalize()],
        batch_size=4, shuffle=False, epochs=1, overrides={"errors.max_error_rate": 0.5}))
    errors = [e for batch in loader for e in batch.errors]
    loader.close()
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"epoch 0, index 3, {d}/names-0.tar#b\ufffdd: bad_record: "), errors
    assert errors[0].endswith("a member's name is not UTF-8"), errors


def test_a_shard_that_does_not_exist_is_a_configuration_error(sharded, headrace_bin, tmp_path):
    n = len(list((sharded / "shards").glob("shard-*.tar")))
    config = shards_config(tmp_path / "m.yaml", sharded, pattern=shard_pattern(sharded, n + 1))
    _, proc = run(headrace_bin, config, tmp_path, "missing", check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"shard-{n:06d}.tar" in proc.stderr and "does not exist" in proc.stderr


def test_source_keys_are_validated_by_name(sharded, headrace_bin, tmp_path):
    both = shards_config(tmp_path / "both.yaml", sharded)
    both.write_text(both.read_text().replace(
        "source:\n", f"source:\n  manifest: {sharded / 'manifest.jsonl'}\n"))
    _, proc = run(headrace_bin, both, tmp_path, "both", check=False)
    assert proc.returncode == 2
    assert "source.manifest" in proc.stderr and "source.shards" in proc.stderr
    glob = shards_config(tmp_path / "glob.yaml", sharded, pattern="s3://b/shard-*.tar")
    _, proc = run(headrace_bin, glob, tmp_path, "glob", check=False)
    assert proc.returncode == 2 and "brace range" in proc.stderr, proc.stderr
    # A window the cache cannot hold, and a cache the budget cannot hold, name the keys.
    small = shards_config(tmp_path / "small.yaml", sharded,
                          source="shuffle_window: 4\nblock_bytes: 65536\ncache_bytes: 65536")
    _, proc = run(headrace_bin, small, tmp_path, "small", check=False)
    assert proc.returncode == 2
    assert "source.cache_bytes" in proc.stderr and "source.shuffle_window" in proc.stderr
    big = shards_config(tmp_path / "big.yaml", sharded, source="cache_bytes: 64MiB")
    _, proc = run(headrace_bin, big, tmp_path, "big", check=False)
    assert proc.returncode == 2
    assert "source.cache_bytes" in proc.stderr and "memory.budget_bytes" in proc.stderr


# --- Lists of images per sample: the same dataset as a manifest, shards and Parquet ---

import numpy as np  # noqa: E402

import list_dataset as ld  # noqa: E402


@pytest.fixture(scope="module")
def list_sources(sample_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("lists")
    return {"manifest": ld.write_manifest(sample_dir, out / "m"),
            "shards": ld.write_shards(sample_dir, out / "s"),
            "parquet": ld.write_parquet(sample_dir, out / "p")}


def test_a_list_of_images_per_sample_gives_the_same_batches_from_every_source(
        sample_dir, list_sources):
    """0-3 views per sample through decode, resize and normalize (each item): the shards
    (KEY.N.jpg members), Parquet list<binary>, list<struct<bytes, path>> and list<string>
    paths all give the manifest's views, views_count and label arrays, byte for byte."""
    want, errors = ld.collect({"manifest": list_sources["manifest"], "fields": ld.MANIFEST_FIELDS,
                               "allow_absolute_paths": True, "root": "/"})
    assert errors == []
    n = len(want["index"])
    assert n == 48 and list(want["index"]) == list(range(n))
    assert list(want["views_count"]) == [i % 4 for i in range(n)]
    assert list(want["label"]) == [i % 7 for i in range(n)]
    assert want["views"].shape == (n, ld.MAX_VIEWS, 3, 24, 24)
    for i in range(n):
        assert want["views"][i, : i % 4].any(axis=(1, 2, 3)).all(), i
        assert not want["views"][i, i % 4:].any(), i
    sources = {
        "shards": {"shards": list_sources["shards"], "fields": ld.SHARD_FIELDS},
        "parquet list<binary>": {"parquet": list_sources["parquet"],
                                 "fields": ld.parquet_fields("views")},
        "parquet list<struct<bytes, path>>": {"parquet": list_sources["parquet"],
                                              "fields": ld.parquet_fields("hf_views")},
        "parquet list<string> paths": {"parquet": list_sources["parquet"], "root": sample_dir,
                                       "fields": ld.parquet_fields("view_paths")},
    }
    for name, source in sources.items():
        got, errors = ld.collect(source)
        assert errors == [], name
        for field in want:
            assert got[field].dtype == want[field].dtype, (name, field)
            assert np.array_equal(got[field], want[field]), (name, field)


def test_bad_list_members_fail_only_their_samples_each_named(sample_dir, tmp_path):
    """Four bad samples in the shards: a fourth view (max_items 3), item 0 twice, a .cls
    that is not a number and a corrupt second view; each is its own named error and the
    other 44 samples come through with the manifest's values."""
    recs = ld.records(sample_dir)

    def members(i, items):
        key = recs[i][0]
        if i == 3:  # three views already: one more is over max_items
            return items + [(f"{key}.3.jpg", items[0][1])]
        if i == 6:  # "00" is item 0 again
            return items + [(f"{key}.00.jpg", items[0][1])]
        if i == 9:
            return [(n, b"nine\n" if n.endswith(".cls") else d) for n, d in items]
        if i == 10:
            return [(n, b"\xff\xd8\xff not a jpeg" if n.endswith(".1.jpg") else d)
                    for n, d in items]
        return items

    pattern = ld.write_shards(sample_dir, tmp_path / "bad", members=members)
    got, errors = ld.collect({"shards": pattern, "fields": ld.SHARD_FIELDS})
    assert sorted(int(i) for i in got["index"]) == [i for i in range(48) if i not in (3, 6, 9, 10)]
    assert len(errors) == 4, errors
    by_index = {i: [e for e in errors if f"index {i}," in e] for i in (3, 6, 9, 10)}
    assert all(len(v) == 1 for v in by_index.values()), errors
    assert "bad_record" in by_index[3][0] and "has 4 items, more than its max_items 3" in by_index[3][0]
    assert f"#{recs[3][0]}" in by_index[3][0]
    assert "are both item 0 of field 'views'" in by_index[6][0]
    assert "field 'label': member is not an integer: 'nine" in by_index[9][0]
    assert "views[1]" in by_index[10][0] and "corrupt" in by_index[10][0]
    assert list(got["views_count"]) == [i % 4 for i in got["index"]]
    assert list(got["label"]) == [i % 7 for i in got["index"]]


def test_source_fields_and_shard_fields_together_are_a_config_error(sharded):
    import headrace
    with pytest.raises(headrace.ConfigError, match="source.fields and source.shard_fields are "
                                                   "exclusive"):
        headrace.Pipeline(source={"shards": shard_pattern(sharded), "fields": ld.SHARD_FIELDS,
                                  "shard_fields": "image=jpg conversation=json"})


def test_scalars_come_from_members_even_when_no_op_reads_media(sample_dir, list_sources):
    """A pipeline with no op at all still reads each sample's members (shards) or row
    group (Parquet): the .cls label and the label column reach the batch."""
    import headrace
    fields = [{"name": "label", "kind": "int", "key": "cls"}]
    for source in ({"shards": list_sources["shards"], "fields": fields},
                   {"parquet": list_sources["parquet"],
                    "fields": [dict(fields[0], key="label")]}):
        p = headrace.Pipeline(source=source, batch_size=8, cpu_threads=2,
                              memory_budget="64MiB", shuffle=False)
        labels, errors = [], []
        with headrace.Loader(p) as loader:
            for batch in loader:
                errors += batch.errors
                labels += [int(x) for x in np.asarray(batch["label"])]
        assert errors == [], source
        assert labels == [i % 7 for i in range(48)], source


def test_mixed_video_vqa_samples_give_the_same_batches_from_files_and_shards(headrace_bin,
                                                                             tmp_path):
    """examples/video_vqa.yaml and video_vqa_shards.yaml (a clip, a still and a
    conversation per sample) over one make-sample dataset: shards written by make-sample
    (--modalities ... --shards) hold each media as its own member, and, unshuffled, the
    two sources give byte-identical batches."""
    data = tmp_path / "data" / "multimodal"
    run_headrace(headrace_bin, "make-sample", "--out", data, "--samples", 20, "--seed", 4,
                 "--modalities", "video,audio", "--shards", "--shard-size", 200000)
    shards = sorted((data / "shards").glob("shard-*.tar"))
    assert len(shards) >= 2, shards
    with tarfile.open(shards[0]) as tar:
        names = tar.getnames()
    assert names[:4] == ["000000000.jpg", "000000000.mp4", "000000000.wav", "000000000.json"]

    digests = {}
    for example in ("video_vqa", "video_vqa_shards"):
        report = tmp_path / f"{example}.json"
        # The examples read data/multimodal relative to the working directory.
        proc = subprocess.run(
            [str(headrace_bin), "run", str(REPO / "examples" / f"{example}.yaml"), "--quiet",
             "--digests", "--report", str(report), "--set", "shuffle=false",
             "--set", "execution.cpu_threads=2"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        got = read_report(report)
        assert got["samples"] == 20 and got["errors"]["total"] == 0, got["errors"]
        digests[example] = got["batch_digests"]
    assert digests["video_vqa_shards"] == digests["video_vqa"]


# --- Damaged shards: skipped whole, counted once, named (issue 26) ---

import hostile_files as hostile  # noqa: E402


def copy_shards(dataset, out):
    shutil.copytree(dataset / "shards", out)
    return sorted(out.glob("shard-*.tar"))


def damage_indexes(shards):
    """Shards 1-4 of `shards` with an index that cannot be trusted, each in its own way."""
    damages = [hostile.index_not_json, hostile.index_version,
               lambda i: hostile.index_bytes(i, -1), lambda i: hostile.index_bytes(i, 1536)]
    for shard, damage in zip(shards[1:5], damages):
        index = shard.with_name(shard.name + ".idx.json")
        index.write_bytes(damage(index.read_bytes()))
    return shards[1:5]


def shard_sizes(shards):
    return [len(json.loads(s.with_name(s.name + ".idx.json").read_bytes())["samples"])
            for s in shards]


def test_damaged_shards_are_skipped_whole_counted_once_and_named(sharded, headrace_bin,
                                                                 tmp_path):
    shards = copy_shards(sharded, tmp_path / "d")
    assert len(shards) >= 5, shards
    good = [shards[0]] + shards[5:]
    good_samples = sum(shard_sizes(good))
    bad = damage_indexes(shards)
    pattern = f"{tmp_path / 'd'}/shard-{{000000..{len(shards) - 1:06d}}}.tar"
    config = shards_config(tmp_path / "d.yaml", sharded, pattern=pattern,
                           extra="errors: {max_error_rate: 0.5}\nshuffle: false")
    report, _ = run(headrace_bin, config, tmp_path, "d")
    assert report["samples"] == good_samples
    errors = report["errors"]
    assert errors["total"] == 4 and errors["by_kind"] == {"shard_error": 4}, errors
    named = [(e["epoch"], e["index"], e["uri"], e["kind"]) for e in errors["first"]]
    assert named == [(0, i + 1, str(s), "shard_error") for i, s in enumerate(bad)], named
    for e in errors["first"]:
        assert e["uri"] + ".idx.json" in e["reason"], e
    # The good shards give what they give alone, in order.
    alone = shards_config(tmp_path / "g.yaml", sharded, extra="shuffle: false",
                          pattern="{" + ",".join(map(str, good)) + "}")
    reference, _ = run(headrace_bin, alone, tmp_path, "g")
    assert report["batch_digests"] == reference["batch_digests"]


def test_damaged_shards_give_the_same_batches_on_every_run_and_on_resume(sharded, headrace_bin,
                                                                         tmp_path):
    shards = copy_shards(sharded, tmp_path / "d")
    damage_indexes(shards)
    pattern = f"{tmp_path / 'd'}/shard-{{000000..{len(shards) - 1:06d}}}.tar"
    config = shards_config(tmp_path / "d.yaml", sharded, pattern=pattern, source="shuffle_window: 2",
                           extra="errors: {max_error_rate: 0.5}")
    config.write_text(config.read_text().replace("epochs: 1\n", "epochs: 2\n"))
    full, _ = run(headrace_bin, config, tmp_path, "full")
    again, _ = run(headrace_bin, config, tmp_path, "again", "--set", "execution.cpu_threads=1")
    assert again["batch_digests"] == full["batch_digests"]
    for k in (1, len(full["batch_digests"]) // 2 + 1):
        part, _ = run(headrace_bin, config, tmp_path, f"from{k}", "--start-batch", k)
        assert part["batch_digests"] == full["batch_digests"][k:], k
        assert part["errors"]["by_kind"] == {"shard_error": 4}  # once per run, resumed or not


def test_a_damaged_shard_fails_the_run_when_asked_or_past_the_error_budget(sharded, headrace_bin,
                                                                           tmp_path):
    shards = copy_shards(sharded, tmp_path / "d")
    bad = damage_indexes(shards)[0]
    pattern = f"{tmp_path / 'd'}/shard-{{000000..{len(shards) - 1:06d}}}.tar"
    fail = shards_config(tmp_path / "f.yaml", sharded, pattern=pattern,
                         extra="errors: {on_bad_shard: fail}")
    report, proc = run(headrace_bin, fail, tmp_path, "f", check=False)
    assert proc.returncode == 1 and report is None, proc.stderr
    assert str(bad) + ".idx.json" in proc.stderr and "on_bad_shard" in proc.stderr, proc.stderr
    strict = shards_config(tmp_path / "s.yaml", sharded, pattern=pattern,
                           extra="errors: {max_error_rate: 0.01, min_samples: 1}")
    _, proc = run(headrace_bin, strict, tmp_path, "s", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "too many bad samples" in proc.stderr and "shard_error=4" in proc.stderr, proc.stderr
    typo = shards_config(tmp_path / "t.yaml", sharded, pattern=pattern,
                         extra="errors: {on_bad_shard: ignore}")
    _, proc = run(headrace_bin, typo, tmp_path, "t", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "errors.on_bad_shard" in proc.stderr and "skip" in proc.stderr and "fail" in proc.stderr


def test_an_index_claiming_a_million_samples_for_a_small_shard_is_refused_unread(
        sharded, headrace_bin, tmp_path):
    shards = copy_shards(sharded, tmp_path / "d")
    index = shards[1].with_name(shards[1].name + ".idx.json")
    held = shard_sizes(shards[1:2])[0]
    index.write_bytes(hostile.index_million_samples(index.read_bytes()))
    pattern = f"{tmp_path / 'd'}/shard-{{000000..{len(shards) - 1:06d}}}.tar"
    config = shards_config(tmp_path / "m.yaml", sharded, pattern=pattern,
                           extra="errors: {max_error_rate: 0.5}\nshuffle: false")
    report, _ = run(headrace_bin, config, tmp_path, "m")
    assert report["samples"] == 96 - held
    [error] = report["errors"]["first"]
    assert error["kind"] == "shard_error" and error["uri"] == str(shards[1]), error
    assert "more than the index of a shard" in error["reason"], error
    # Not one byte of the 40 MB index was read: RSS stays far below what parsing it took.
    assert report["peak_rss_bytes"] < 400 << 20, report["peak_rss_bytes"]


def test_damage_in_a_members_header_fails_only_the_sample_it_is_in(sharded, headrace_bin,
                                                                   tmp_path):
    d = tmp_path / "hdr"
    d.mkdir()
    members = [m for i in range(4) for m in sample_members(sharded, f"{i:03d}", i)]
    whole = bytearray(tar_bytes(members))
    infos = tarfile.open(fileobj=io.BytesIO(bytes(whole))).getmembers()
    assert infos[4].name == "002.jpg"
    whole[infos[4].offset + 148] ^= 0x07  # its header's checksum
    (d / "hdr-0.tar").write_bytes(bytes(whole))
    config = shards_config(tmp_path / "h.yaml", sharded, pattern=f"{d}/hdr-{{0..0}}.tar",
                           extra="errors: {max_error_rate: 0.5}\nshuffle: false")
    report, _ = run(headrace_bin, config, tmp_path, "h")
    # 000 and 001 are whole and delivered; 002 is the damaged one; 003 lies past the damage.
    assert report["samples"] == 2, report["errors"]
    [error] = report["errors"]["first"]
    assert (error["index"], error["uri"], error["kind"]) == (2, f"{d}/hdr-0.tar#002",
                                                             "corrupt_data"), error
    assert "002.jpg" in error["reason"], error


def test_the_report_says_how_well_a_shard_window_shuffles(sharded, headrace_bin, tmp_path):
    """The shuffle-quality figure: neighbours in a batch, in dataset order, against a
    uniform shuffle's distance ((N^2 - 1) / 3N): about 1 for a full shuffle, far less for
    one shard at a time, near 0 unshuffled."""
    n = len(list((sharded / "shards").glob("shard-*.tar")))
    quality = {}
    for name, source, extra in (("one", "shuffle_window: 1", ""),
                                ("all", f"shuffle_window: {n}", ""),
                                ("off", "", "shuffle: false")):
        report, _ = run(headrace_bin, shards_config(tmp_path / f"{name}.yaml", sharded,
                                                    source=source, extra=extra),
                        tmp_path, name)
        shuffle = report["shuffle"]
        assert shuffle["uniform_neighbour_distance"] == pytest.approx((96 ** 2 - 1) / (3 * 96))
        quality[name] = shuffle["quality"]
    assert quality["off"] < 0.05
    assert quality["one"] < 0.6 * quality["all"], quality
    assert 0.6 < quality["all"] < 1.4, quality


def test_a_global_order_over_shards_is_the_manifests_shuffle_at_one_request_per_sample(
        sharded, moto_s3, headrace_bin, tmp_path):
    """source.shuffle_scope: global: the shards' samples in one permutation, the one a
    manifest of the same samples gets (so the same batches, byte for byte), each sample's
    members (.jpg and .json) fetched by one ranged read from S3; a cache that cannot hold
    the largest sample is a configuration error naming source.cache_bytes."""
    env, n = upload_shards(sharded, moto_s3, headrace_bin, tmp_path, "global")
    manifest, _ = run(headrace_bin, write_config(tmp_path / "m.yaml", sharded), tmp_path, "m")
    pattern = f"s3://{BUCKET}/global/shard-{{000000..{n - 1:06d}}}.tar"
    report, proc = run(headrace_bin, shards_config(tmp_path / "g.yaml", sharded, pattern=pattern,
                                                   source="shuffle_scope: global"),
                       tmp_path, "g", env=env)
    assert report["samples"] == 96 and report["errors"]["total"] == 0, proc.stdout
    assert report["batch_digests"] == manifest["batch_digests"]
    cache = report["block_cache"]
    # A shard's size and its index, then one read per sample (its second member a hit).
    assert cache["block_reads"] == 96 and cache["block_hits"] + cache["block_waits"] == 96
    assert report["storage"]["s3"]["requests"] == 2 * n + 96
    assert report["shuffle"]["quality"] == pytest.approx(manifest["shuffle"]["quality"])
    # A window of one shard mixes far less.
    window, _ = run(headrace_bin, shards_config(tmp_path / "w.yaml", sharded,
                                                source="shuffle_window: 1"), tmp_path, "w")
    assert window["shuffle"]["quality"] < 0.6 * report["shuffle"]["quality"]

    small = shards_config(tmp_path / "small.yaml", sharded,
                          source="shuffle_scope: global\ncache_bytes: 4096")
    proc = run_headrace(headrace_bin, "run", small, "--quiet", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "source.cache_bytes (4096) cannot hold the largest sample" in proc.stderr
