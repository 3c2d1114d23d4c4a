"""End to end: `headrace make-sample` then `headrace run`, through the real binary."""
import json
import subprocess

import pytest

from e2e_util import REPO, read_report, run_headrace, write_config


def test_make_sample_writes_a_manifest_images_and_a_tokenizer(sample_dir):
    lines = (sample_dir / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 48
    first = json.loads(lines[0])
    assert first["image"].startswith("images/")
    assert (sample_dir / first["image"]).stat().st_size > 1000
    assert first["conversations"][0]["from"] == "human"
    assert first["conversations"][0]["value"].startswith("<image>\n")
    assert first["conversations"][1]["from"] == "gpt"
    assert (sample_dir / "tokenizer.model").stat().st_size > 0


def test_make_sample_is_deterministic(tmp_path, headrace_bin, sample_dir):
    run_headrace(headrace_bin, "make-sample", "--out", tmp_path, "--samples", 48, "--seed", 5,
                 "--threads", 1)
    assert (tmp_path / "manifest.jsonl").read_bytes() == (sample_dir / "manifest.jsonl").read_bytes()
    name = "images/000017.jpg"
    assert (tmp_path / name).read_bytes() == (sample_dir / name).read_bytes()


def test_run_report_has_every_field_with_sane_values(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report_path = tmp_path / "report.json"
    proc = run_headrace(headrace_bin, "run", config, "--report", report_path,
                        "--set", "epochs=2", "--set", "trainer.step_ms=5")
    assert "wait-time ratio" in proc.stdout
    r = read_report(report_path)
    assert r["samples"] == 96
    assert r["batches"] == 12
    assert r["elapsed_s"] > 0
    assert r["samples_per_s"] == pytest.approx(r["samples"] / r["elapsed_s"], rel=0.01)
    assert 0 <= r["wait_time_ratio"] <= 1
    assert 0 < r["time_to_first_batch_s"] < r["elapsed_s"]
    assert r["peak_rss_bytes"] > r["baseline_rss_bytes"] > 0
    assert r["memory_budget_bytes"] == 64 * 1024 * 1024
    assert 0 < r["budget_peak_bytes"] <= r["memory_budget_bytes"]
    assert r["bytes_copied_per_sample"] == 0
    # Memory outside the budget: the parsed manifest and the CPU threads' scratch.
    memory = r["memory"]
    assert memory["manifest_bytes"] > 48 * 200
    assert memory["scratch_sample_peak_bytes"] > 0
    assert 0 < memory["scratch_bytes"] <= memory["scratch_peak_bytes"]
    assert memory["scratch_bytes_per_thread"] == 32 * 1024 * 1024
    # What a decoder may hold per thread beyond the budget: a quarter of the 64 MiB budget,
    # at least 16 MiB.
    assert memory["decode_bytes_per_thread"] == 16 * 1024 * 1024
    # 12 batches of 5 buffers: after the first few, batch memory is reused, not faulted in.
    assert r["batch_memory"]["reused"] + r["batch_memory"]["fresh"] == 12 * 5
    assert r["batch_memory"]["reused"] > r["batch_memory"]["fresh"]
    assert r["errors"] == {"total": 0, "by_kind": {}, "first": []}
    assert r["trainer_step_ms"] == 5
    names = [s["name"] for s in r["stages"]]
    assert names == ["read", "cpu", "batch"]
    for s in r["stages"]:
        assert {"name", "items", "busy_s", "starved_s", "blocked_s", "utilization", "verdict"} <= s.keys()
        assert s["verdict"] in {"io-bound", "cpu-bound", "starved", "blocked"}
        assert 0 <= s["utilization"] <= 1
    cpu = r["stages"][1]
    assert cpu["items"] == 96
    assert [op["name"] for op in r["ops"]] == [
        "image.decode", "image.resize", "image.center_crop", "image.normalize", "text.tokenize"]
    assert r["bottleneck"] in {"trainer", "cpu", "read", "batch"}
    assert r["advice"]


def test_a_slow_trainer_is_named_the_bottleneck(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report_path = tmp_path / "report.json"
    run_headrace(headrace_bin, "run", config, "--report", report_path,
                 "--set", "trainer.step_ms=150", "--set", "execution.cpu_threads=2")
    r = read_report(report_path)
    assert r["wait_time_ratio"] < 0.05
    assert r["bottleneck"] == "trainer"
    assert next(s for s in r["stages"] if s["name"] == "batch")["verdict"] == "blocked"


def digests(headrace_bin, config, tmp_path, *sets, start=None):
    report_path = tmp_path / "digests.json"
    args = ["run", config, "--report", report_path, "--digests", "--quiet"]
    for s in sets:
        args += ["--set", s]
    if start is not None:
        args += ["--start-batch", start]
    run_headrace(headrace_bin, *args)
    return read_report(report_path)["batch_digests"]


def test_batches_are_identical_whatever_the_thread_count(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    one = digests(headrace_bin, config, tmp_path, "execution.cpu_threads=1", "epochs=2")
    two = digests(headrace_bin, config, tmp_path, "execution.cpu_threads=2", "epochs=2")
    three = digests(headrace_bin, config, tmp_path, "execution.cpu_threads=3", "epochs=2")
    assert len(one) == 12
    assert one == two == three
    assert len(set(one)) == 12
    other_seed = digests(headrace_bin, config, tmp_path, "seed=2", "epochs=2")
    assert other_seed != one


def test_start_batch_k_yields_the_uninterrupted_tail(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    full = digests(headrace_bin, config, tmp_path, "epochs=3")
    for k in (1, 6, 7, 17):
        assert digests(headrace_bin, config, tmp_path, "epochs=3", start=k) == full[k:]


def test_random_augmentations_are_deterministic_per_sample(tmp_path, headrace_bin, sample_dir):
    config = tmp_path / "aug.yaml"
    config.write_text(f"""
source: {{manifest: {sample_dir / 'manifest.jsonl'}}}
seed: 3
epochs: 2
batch: {{size: 8}}
ops:
  - image.decode: {{}}
  - image.random_resized_crop: {{size: 48}}
  - image.flip: {{p: 0.5}}
  - image.normalize: {{dtype: bf16, layout: hwc}}
""")
    a = digests(headrace_bin, config, tmp_path, "execution.cpu_threads=1")
    b = digests(headrace_bin, config, tmp_path, "execution.cpu_threads=2")
    assert a == b
    assert digests(headrace_bin, config, tmp_path, "epochs=2", start=7) == a[7:]


def test_config_errors_fail_before_work_and_name_the_key(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    proc = run_headrace(headrace_bin, "run", config, "--set", "batch.sise=4", check=False)
    assert proc.returncode == 2
    assert "batch.sise" in proc.stderr and "size" in proc.stderr
    proc = run_headrace(headrace_bin, "run", config, "--set", "batch.size=0", check=False)
    assert proc.returncode == 2 and "batch.size" in proc.stderr
    proc = run_headrace(headrace_bin, "run", config, "--set", "ops.3.image.normalize.layout=xyz",
                        check=False)
    assert proc.returncode == 2 and "layout" in proc.stderr and "chw" in proc.stderr
    proc = run_headrace(headrace_bin, "run", config, "--set", "memory.budget_bytes=1KiB",
                        check=False)
    assert proc.returncode == 2 and "memory.budget_bytes" in proc.stderr
    proc = run_headrace(headrace_bin, "run", config, "--set", "source.manifest=/no/such.jsonl",
                        check=False)
    assert proc.returncode == 2 and "/no/such.jsonl" in proc.stderr


def test_the_cpp_consumer_example_reads_batches(headrace_bin, sample_dir, tmp_path):
    consumer = headrace_bin.parent / "examples" / "vqa_consumer"
    config = write_config(tmp_path / "p.yaml", sample_dir)
    proc = subprocess.run([consumer, config], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "image           f32[8, 3, 56, 56]" in proc.stdout
    assert "input_ids       i64[8, 48]" in proc.stdout
    assert "6 batches, 48 samples" in proc.stdout


def test_bench_ops_writes_the_cost_of_each_operator(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report_path = tmp_path / "ops.json"
    run_headrace(headrace_bin, "bench", "ops", config, "--samples", 16, "--report", report_path)
    r = read_report(report_path)
    assert [op["name"] for op in r["ops"]][0] == "image.decode"
    assert all(op["ms_per_sample"] > 0 for op in r["ops"])
    assert r["total_ms_per_sample"] == pytest.approx(sum(op["ms_per_sample"] for op in r["ops"]))


def test_bench_engine_reports_steady_and_cpu_efficiency_per_thread_count(tmp_path, headrace_bin,
                                                                         sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)  # batches of 8
    report_path = tmp_path / "engine.json"
    run_headrace(headrace_bin, "bench", "engine", config, "--samples", 16, "--seconds", 0.1,
                 "--report", report_path)
    r = read_report(report_path)
    assert r["samples"] == 16 and r["cpu_ms_per_sample"] > 0
    names = [op["name"] for op in r["ops"]]
    assert r["overhead"][0]["threads"] == 1
    for o in r["overhead"]:
        assert o["batches"] >= 2  # at least the timed samples
        assert o["plan_s"] > 0
        assert o["samples_per_s"] > 0 and o["run_samples_per_s"] > 0
        assert o["efficiency"] == pytest.approx(o["samples_per_s"] / o["ideal_samples_per_s"])
        assert o["ideal_samples_per_s"] == pytest.approx(
            o["threads"] * 1e3 / r["total_ms_per_sample"])
        assert o["cpu_ms_per_sample"] > 0
        assert o["cpu_efficiency"] == pytest.approx(r["cpu_ms_per_sample"] / o["cpu_ms_per_sample"])
        assert [op["name"] for op in o["ops"]] == names
    proc = run_headrace(headrace_bin, "bench", "engine", config, "--seconds", "-1", check=False)
    assert proc.returncode == 2 and "--seconds" in proc.stderr


def test_make_run_config_is_the_example(headrace_bin):
    text = (REPO / "examples" / "vqa.yaml").read_text()
    assert "data/sample/manifest.jsonl" in text


def jpeg_size(data: bytes):
    """(width, height) from a JPEG's SOF marker."""
    i = 2
    while i < len(data):
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + length
    raise AssertionError("no SOF marker")


def test_make_sample_size_fixes_every_image(tmp_path, headrace_bin):
    run_headrace(headrace_bin, "make-sample", "--out", tmp_path, "--samples", 6, "--size", "96x64")
    sizes = {jpeg_size(p.read_bytes()) for p in (tmp_path / "images").glob("*.jpg")}
    assert sizes == {(96, 64)}
    proc = run_headrace(headrace_bin, "make-sample", "--out", tmp_path, "--samples", 2,
                        "--size", "96", check=False)
    assert proc.returncode == 2


def test_make_sample_vlm_mix_has_one_placeholder_per_listed_image(tmp_path, headrace_bin):
    """--mix vlm (tools/make_sample/make_sample.h): an "images" list per record, one
    <image> per image, 1-20 question/answer pairs, some videos; the same for any thread
    count; refused with --modalities or --size."""
    a, b = tmp_path / "a", tmp_path / "b"
    run_headrace(headrace_bin, "make-sample", "--out", a, "--samples", 24, "--seed", 2,
                 "--mix", "vlm")
    run_headrace(headrace_bin, "make-sample", "--out", b, "--samples", 24, "--seed", 2,
                 "--mix", "vlm", "--threads", 1)
    assert (a / "manifest.jsonl").read_bytes() == (b / "manifest.jsonl").read_bytes()
    records = [json.loads(line) for line in (a / "manifest.jsonl").read_text().splitlines()]
    assert len(records) == 24
    for r in records:
        assert "image" not in r and 0 <= len(r["images"]) <= 4
        turns = r["conversations"]
        assert 2 <= len(turns) <= 40 and len(turns) % 2 == 0
        assert sum(t["value"].count("<image>") for t in turns) == len(r["images"])
        assert all(t["from"] == ("human" if k % 2 == 0 else "gpt") for k, t in enumerate(turns))
        for path in r["images"] + ([r["video"]] if "video" in r else []):
            assert (a / path).read_bytes() == (b / path).read_bytes()
        assert turns[0]["value"].startswith("<video>\n") == ("video" in r)
    assert len({len(r["images"]) for r in records}) >= 3
    for extra in (["--modalities", "video"], ["--size", "64x48"]):
        proc = run_headrace(headrace_bin, "make-sample", "--out", tmp_path / "c", "--samples", 2,
                            "--mix", "vlm", *extra, check=False)
        assert proc.returncode == 2 and "--mix vlm" in proc.stderr


def test_trace_shows_reads_operators_and_the_consumer(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    trace_path = tmp_path / "trace.json"
    run_headrace(headrace_bin, "run", config, "--trace", trace_path, "--quiet")
    events = json.loads(trace_path.read_text())["traceEvents"]
    count = lambda ph, name: sum(1 for e in events if e["ph"] == ph and e["name"] == name)
    # Every sample read once; a read refused by the I/O budget's size gate (the object
    # did not fit yet) is issued again later and shows as a second span of its id.
    assert count("b", "read") == count("e", "read") >= 48
    assert len({e["id"] for e in events if e["ph"] == "b" and e["name"] == "read"}) == 48
    assert count("X", "image.decode") == count("X", "text.tokenize") == 48
    assert count("X", "wait") == 7  # six batches and the end of the run
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"consumer", "cpu worker"} <= names


def test_unbounded_epochs_need_a_stop_on_the_command_line(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    proc = run_headrace(headrace_bin, "run", config, "--set", "epochs=null", check=False)
    assert proc.returncode == 2
    assert "epochs: null (unbounded)" in proc.stderr and "--max-batches" in proc.stderr
    # With a stop, an unbounded run goes past the end of the first epoch (6 batches).
    report = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", config, "--set", "epochs=null", "--max-batches", 9,
                 "--report", report)
    assert read_report(report)["batches"] == 9
