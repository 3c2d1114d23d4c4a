"""Bad input is skipped and counted by kind with (epoch, index, uri); nothing crashes or hangs."""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import zlib

import pytest

from e2e_util import read_report, run_headrace, write_config


def png_bytes(width=4, height=4, corrupt_crc=False, pixel=(200, 30, 30)):
    """An RGB PNG of one colour (black: a few KB however large, zeros compress)."""
    raw = b"".join(b"\x00" + bytes(list(pixel) * width) for _ in range(height))

    def chunk(kind, data):
        crc = zlib.crc32(kind + data)
        if corrupt_crc:
            crc ^= 0xFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def png_header(width, height):
    """The signature and IHDR chunk of a PNG, nothing else."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    crc = zlib.crc32(b"IHDR" + ihdr)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", crc)


def make_bad_dataset(sample_dir, out):
    """Copies 16 good samples and appends one sample per kind of bad input."""
    (out / "images").mkdir(parents=True)
    good = [json.loads(l) for l in (sample_dir / "manifest.jsonl").read_text().splitlines()][:16]
    for rec in good:
        shutil.copy(sample_dir / rec["image"], out / rec["image"])
    shutil.copy(sample_dir / "tokenizer.model", out / "tokenizer.model")
    jpeg = (sample_dir / good[0]["image"]).read_bytes()
    (out / "images/zero.jpg").write_bytes(b"")
    (out / "images/truncated.jpg").write_bytes(jpeg[: len(jpeg) // 3])
    (out / "images/badcrc.png").write_bytes(png_bytes(corrupt_crc=True))
    (out / "images/good.png").write_bytes(png_bytes())
    (out / "images/anim.gif").write_bytes(b"GIF89a" + b"\x00" * 64)
    # A header that declares 40000 x 40000 pixels: rejected before any decoding.
    (out / "images/bomb.png").write_bytes(png_header(40000, 40000) + b"\x00" * 64)
    (out / "outside.jpg").write_bytes(jpeg)
    conv = good[0]["conversations"]
    lines = [json.dumps(rec) for rec in good]
    bad = {
        "missing": {"id": "m", "image": "images/missing.jpg", "conversations": conv},
        "zero": {"id": "z", "image": "images/zero.jpg", "conversations": conv},
        "truncated": {"id": "t", "image": "images/truncated.jpg", "conversations": conv},
        "badcrc": {"id": "c", "image": "images/badcrc.png", "conversations": conv},
        "gif": {"id": "g", "image": "images/anim.gif", "conversations": conv},
        "bomb": {"id": "b", "image": "images/bomb.png", "conversations": conv},
        "escape": {"id": "e", "image": "../outside.jpg", "conversations": conv},
        "noimage": {"id": "n", "conversations": conv},
    }
    for rec in bad.values():
        lines.append(json.dumps(rec))
    lines.append("{this is not json")
    lines.append(json.dumps({"id": "png-ok", "image": "images/good.png", "conversations": conv}))
    (out / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return out


def test_each_bad_sample_is_skipped_and_counted_by_kind(tmp_path, headrace_bin, sample_dir):
    data = make_bad_dataset(sample_dir, tmp_path / "bad")
    config = write_config(tmp_path / "p.yaml", data, batch_size=4)
    report_path = tmp_path / "r.json"
    proc = run_headrace(headrace_bin, "run", config, "--report", report_path,
                        "--set", "errors.max_error_rate=0.5", "--set", "epochs=2",
                        "--set", "ops.0.image.decode.max_pixels=100000000")
    r = read_report(report_path)
    # 26 records per epoch: 17 good (16 JPEG + 1 PNG), 9 bad.
    assert r["samples"] == 2 * 17
    assert r["errors"]["total"] == 2 * 9
    assert r["errors"]["by_kind"] == {
        "not_found": 2, "corrupt_data": 2 * 3, "unsupported_format": 2, "pixel_limit": 2,
        "path_escape": 2, "missing_field": 2, "bad_record": 2}
    assert "skipped sample: epoch 0, index" in proc.stderr
    first = r["errors"]["first"]
    assert {e["epoch"] for e in first} == {0, 1}
    missing = next(e for e in first if e["kind"] == "not_found")
    assert missing["uri"].endswith("images/missing.jpg") and missing["index"] == 16
    assert next(e for e in first if e["kind"] == "bad_record")["index"] == 24


def test_skipped_samples_keep_batches_deterministic(tmp_path, headrace_bin, sample_dir):
    data = make_bad_dataset(sample_dir, tmp_path / "bad")
    config = write_config(tmp_path / "p.yaml", data, batch_size=4)
    runs = []
    for threads in (1, 2):
        report_path = tmp_path / f"r{threads}.json"
        run_headrace(headrace_bin, "run", config, "--report", report_path, "--digests",
                     "--set", "errors.max_error_rate=0.5", "--set", f"execution.cpu_threads={threads}")
        runs.append(read_report(report_path)["batch_digests"])
    assert runs[0] == runs[1]


def test_the_run_fails_clearly_past_the_error_budget(tmp_path, headrace_bin, sample_dir):
    data = make_bad_dataset(sample_dir, tmp_path / "bad")
    config = write_config(tmp_path / "p.yaml", data, batch_size=4)
    proc = run_headrace(headrace_bin, "run", config, "--set", "errors.max_error_rate=0.1",
                        check=False)
    assert proc.returncode == 1
    assert "too many bad samples" in proc.stderr
    assert "max_error_rate" in proc.stderr


# --- hostile configuration: exit 2 naming the key or file and what is allowed ------------

def _deep_key():
    return "batch" + ".x" * 20000 + "=1"


@pytest.mark.parametrize("override, mentions", [
    # Used to abort on an uncaught std::system_error (40000 threads).
    ("execution.cpu_threads=40000", ["execution.cpu_threads: must be in [0, 1024]", "got 40000"]),
    # Used to overflow computing io_inflight (16 x 2e9), then die of bad_alloc.
    ("execution.cpu_threads=2000000000", ["execution.cpu_threads: must be in [0, 1024]"]),
    ("execution.io_inflight=1000000000", ["execution.io_inflight: must be in [0, 16384]"]),
    ("prefetch.depth=1000000000", ["prefetch.depth: must be in [1, 1024]"]),
    # Used to overflow the stack, one recursion per part.
    (_deep_key(), ["the key has 20001 parts, at most 32"]),
    # Used to wrap the batch's bytes to a few KB and pass the budget check.
    ("ops.2.image.center_crop.size=1073741824",
     ["ops[2].image.center_crop.width: must be in [1, 16384]", "got 1073741824"]),
    # Used to pass, then fail every sample.
    ("ops.1.image.resize.shorter_side=1000000",
     ["ops[1].image.resize.shorter_side: must be in [0, 16384]", "got 1000000"]),
    # In range, but over the budget: the message names the key that is too large, not
    # only memory.budget_bytes.
    ("ops.2.image.center_crop.size=16384",
     ["ops[2].image.center_crop.size 16384: a batch of 4 samples would take",
      "lower it or batch.size, or raise memory.budget_bytes"]),
    ("ops.4.text.tokenize.max_length=1048576",
     ["ops[4].text.tokenize.max_length 1048576: a batch of 4 samples would take"]),
])
def test_out_of_range_values_exit_2_naming_the_key(tmp_path, headrace_bin, sample_dir,
                                                   override, mentions):
    config = write_config(tmp_path / "p.yaml", sample_dir, batch_size=4)
    proc = run_headrace(headrace_bin, "run", config, "--set", override, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    for m in mentions:
        assert m in proc.stderr
    assert len(proc.stderr) < 2000  # a 20000-part key is not echoed whole


def test_a_config_file_of_several_yaml_documents_exits_2_saying_so(tmp_path, headrace_bin,
                                                                 sample_dir):
    # Used to run the first document and drop the second without a word.
    config = write_config(tmp_path / "p.yaml", sample_dir, batch_size=4)
    lines = config.read_text().count("\n")
    config.write_text(config.read_text() + "---\nbatch: {size: 2}\n")
    proc = run_headrace(headrace_bin, "run", config, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "holds 2 documents" in proc.stderr
    assert f"a second one at line {lines + 2}" in proc.stderr


def test_a_config_yaml_cpp_would_loop_on_exits_2_at_once(tmp_path, headrace_bin):
    # Debian 12's yaml-cpp (0.7) loops forever, allocating, when it loads all documents of
    # this text (found by the config fuzz target); the run used to be killed for memory.
    config = tmp_path / "p.yaml"
    config.write_bytes(b",ourc? \xe5.ha")
    proc = run_headrace(headrace_bin, "run", config, check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "YAML syntax error at line 1, column 1" in proc.stderr


def test_a_config_that_is_not_a_regular_file_exits_2_naming_it(tmp_path, headrace_bin):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    # /dev/zero used to be read without end; a FIFO used to block forever in open().
    for path, what in [("/dev/zero", "is a character device"), (fifo, "is a FIFO"),
                       (tmp_path, "is a directory")]:
        proc = run_headrace(headrace_bin, "run", path, check=False, timeout=60)
        assert proc.returncode == 2, (path, proc.stderr)
        assert f"{path} {what}" in proc.stderr


def test_a_directory_as_manifest_or_model_exits_2_naming_it(tmp_path, headrace_bin,
                                                             sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir, batch_size=4)
    folder = tmp_path / "folder"
    folder.mkdir()
    for override in (f"source.manifest={folder}", f"ops.4.text.tokenize.model={folder}"):
        proc = run_headrace(headrace_bin, "run", config, "--set", override, check=False,
                            timeout=60)
        assert proc.returncode == 2, (override, proc.stderr)
        assert f"not a regular file (a directory): '{folder}'" in proc.stderr


def test_an_unwritable_report_path_is_found_before_the_run(tmp_path, headrace_bin,
                                                          sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir, batch_size=4)
    (tmp_path / "file").write_text("a file, not a folder")
    for flag in ("--report", "--trace"):
        for path in (tmp_path / "file" / "r.json", tmp_path):
            proc = run_headrace(headrace_bin, "run", config, flag, path, check=False)
            assert proc.returncode == 2, (flag, path, proc.stderr)
            assert f"{flag} {path}: cannot write" in proc.stderr
            assert "Headrace run:" not in proc.stdout  # no run happened


def test_the_error_budget_message_gives_both_rates_as_percentages(tmp_path, headrace_bin,
                                                                 sample_dir):
    data = make_bad_dataset(sample_dir, tmp_path / "bad")
    config = write_config(tmp_path / "p.yaml", data, batch_size=4)
    proc = run_headrace(headrace_bin, "run", config, "--set", "errors.max_error_rate=0.1",
                        check=False)
    assert proc.returncode == 1
    # Was "9 of 26 failed (34.6%), above errors.max_error_rate 0.100000".
    assert re.search(r"\d+ of \d+ samples failed \(\d+(\.\d+)?%\), "
                     r"above errors\.max_error_rate 10%;", proc.stderr), proc.stderr


# --- interrupts --------------------------------------------------------------------------

@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "SIGINT"),
                                             (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_stops_the_run_cleanly_with_a_partial_report(tmp_path, headrace_bin,
                                                             sample_dir, sig, code, name):
    data = make_bad_dataset(sample_dir, tmp_path / "bad")
    config = write_config(tmp_path / "p.yaml", data, batch_size=4)
    report_path = tmp_path / "r.json"
    # A run far longer than the test: it ends only by the signal.
    proc = subprocess.Popen(
        [str(headrace_bin), "run", str(config), "--report", str(report_path),
         "--set", "epochs=1000000", "--set", "errors.max_error_rate=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A shell's background job inherits SIGINT ignored, which headrace keeps.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # The first skipped sample's line: the consumer loop is running.
        for line in proc.stderr:
            if "skipped sample" in line:
                break
        else:
            pytest.fail(f"no skipped sample logged; exit {proc.wait()}")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)  # a guard against a hang only
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stderr
    assert f"stopped by {name}" in stderr and "the report is partial" in stderr
    assert f"interrupted       by {name}" in stdout
    r = read_report(report_path)
    assert r["partial"] is True
    assert r["interrupted_by"] == name
    assert r["batches"] >= 1


# --- hostile chat templates (issue 26): a configuration error at start, or a sample's ----

def _byte_char(b):
    """GPT-2's byte-level character for byte b."""
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE  # noqa: E731
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if not printable(x)))


def write_byte_tokenizer(path):
    """A byte-level BPE tokenizer.json with no merges: one token per byte."""
    vocab = {_byte_char(b): b for b in range(256)}
    path.write_text(json.dumps({
        "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
        "post_processor": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": []}}))
    return path


def tokenize_with_template(tmp_path, sample_dir, template):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    tokenizer = write_byte_tokenizer(tmp_path / "tokenizer.json")
    text = config.read_text().replace(
        f"text.tokenize: {{model: {sample_dir / 'tokenizer.model'}, max_length: 48}}",
        f"text.tokenize: {{tokenizer: {tokenizer}, max_length: 48, chat_template: "
        f"{json.dumps(template)}}}")
    assert "chat_template" in text
    config.write_text(text)
    return config


@pytest.mark.parametrize("template, mentions", [
    ("{{ 1 // 0 }}", "division or modulo by zero"),  # was SIGFPE
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nests deeper"),  # SIGSEGV
    ("{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}", "nests deeper"),  # SIGSEGV after 90 s
    ("{% for i in range(10**9) %}{% endfor %}", "range would make a value"),  # RSS > 8 GiB
])
def test_a_chat_template_failing_the_probe_conversation_exits_2(tmp_path, headrace_bin,
                                                                sample_dir, template, mentions):
    config = tokenize_with_template(tmp_path, sample_dir, template)
    proc = run_headrace(headrace_bin, "run", config, "--report", tmp_path / "r.json",
                        check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "text.tokenize.chat_template" in proc.stderr and mentions in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_chat_template_failing_on_some_samples_skips_only_those(tmp_path, headrace_bin,
                                                                  sample_dir):
    # The probe's user turn ("Hello") has an odd length: it passes; samples whose first
    # turn has an even length divide by zero, each its own error, and the run goes on.
    template = ("{% if messages[0]['content']|length % 2 == 0 %}{{ 1 // 0 }}{% endif %}"
                "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    config = tokenize_with_template(tmp_path, sample_dir, template)
    report = tmp_path / "r.json"
    proc = run_headrace(headrace_bin, "run", config, "--report", report,
                        "--set", "errors.max_error_rate=1.0", timeout=300)
    r = read_report(report)
    assert r["errors"]["total"] > 0 and r["samples"] > 0, proc.stderr
    assert "division or modulo by zero" in proc.stderr


def lopsided_blend(root, manifest, until):
    """A blend of `manifest` twice, weights 1 and 1e-12, ending as `until` says (YAML,
    ", " between its keys); returns the config's path."""
    config = root / "blend.yaml"
    config.write_text(
        "source:\n"
        f"  mix:\n    - {{name: a, manifest: {manifest}, weight: 1}}\n"
        f"    - {{name: b, manifest: {manifest}, weight: 1.0e-12}}\n"
        f"  {until.replace(', ', chr(10) + '  ')}\n"
        "batch: {size: 4}\nepochs: 1\n"
        "ops: [image.decode, {image.resize: {shorter_side: 32}}, "
        "{image.center_crop: {size: 32}}, image.normalize]\n")
    return config


@pytest.mark.parametrize("until", [
    "until: samples, samples: 68719476735",        # under the 2^36 cap, 550 GB of order
    "until: samples, samples: 1000000000",         # took 7.7 GB
    "until: all_exhausted",                        # weights 1 and 1e-12: ~1e12 positions
])
def test_a_blend_epoch_too_long_to_hold_exits_2_at_once(tmp_path, headrace_bin, sample_dir,
                                                       until):
    """A blend whose epoch order cannot be held is refused before any work, naming the
    key (it was allocated whole: 7.7 GB, std::bad_alloc, or a walk of minutes)."""
    config = lopsided_blend(tmp_path, sample_dir / "manifest.jsonl", until)
    proc = run_headrace(headrace_bin, "run", config, check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.search(r"source\.(samples|mix)", proc.stderr), proc.stderr[-2000:]
    assert "more than" in proc.stderr


def test_an_image_wider_than_smart_resize_takes_is_refused_from_its_header(tmp_path, headrace_bin):
    """A 1 x 80,000,000 PNG (under image.decode's max_pixels) before image.smart_resize:
    refused from its header as smart_resize would refuse it (pixel_limit), before a pixel
    is decoded. The file is a header and nothing else, so a decode would have failed as
    corrupt_data instead: without the smart_resize after it, that is what happens."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images/wide.png").write_bytes(png_header(1, 80_000_000))
    (tmp_path / "images/ok.png").write_bytes(png_bytes(56, 56))
    (tmp_path / "manifest.jsonl").write_text(
        json.dumps({"id": "wide", "image": "images/wide.png"}) + "\n" +
        json.dumps({"id": "ok", "image": "images/ok.png"}) + "\n")

    def run(ops):
        config = tmp_path / "p.yaml"
        config.write_text(f"""
source: {{manifest: {tmp_path / 'manifest.jsonl'}, fields: [{{name: image, kind: image}}]}}
epochs: 1
shuffle: false
batch: {{size: 2}}
ops:
{ops}
errors: {{max_error_rate: 0.5}}
trainer: {{step_ms: 0}}
""")
        report = tmp_path / "r.json"
        proc = run_headrace(headrace_bin, "run", config, "--report", report)
        return read_report(report), proc.stdout + proc.stderr

    report, out = run("  - image.decode: {}\n"
                      "  - image.smart_resize: {preset: qwen2_vl}\n"
                      "  - vision.patchify: {preset: qwen2_vl}\n")
    assert report["samples"] == 1
    assert report["errors"]["by_kind"] == {"pixel_limit": 1}, out
    assert "image 1x80000000: aspect ratio 8e+07 is above max_aspect_ratio 200 " \
           "(image.smart_resize; refused from the header)" in out, out
    report, out = run("  - image.decode: {}\n"
                      "  - image.resize: {width: 8, height: 8}\n"
                      "  - image.normalize: {}\n")
    assert report["errors"]["by_kind"] == {"corrupt_data": 1}, out


def patch_pipeline(tmp_path, records, max_items, tail):
    """`records` as the manifest, and a pipeline of Qwen2-VL's patches from their images,
    unshuffled, batches of 4, a budget of 256 MiB, then `tail` (YAML lines)."""
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = tmp_path / "p.yaml"
    config.write_text(f"""
source: {{manifest: {tmp_path / 'manifest.jsonl'},
          fields: [{{name: images, kind: image, max_items: {max_items}}}]}}
epochs: 1
shuffle: false
batch: {{size: 4}}
memory: {{budget_bytes: 256MiB}}
ops:
  - image.decode: {{field: images}}
  - image.smart_resize: {{field: images, preset: qwen2_vl}}
  - vision.patchify: {{field: images, preset: qwen2_vl}}
""" + tail)
    return config


def test_a_batchs_patches_are_held_to_what_a_batch_may_hold(tmp_path, headrace_bin):
    """Ragged batches against the budget: each 1000x1000 image is 24 MB of float32 patches
    (5184 x 1176 x 4 bytes) from a 3 KB file. A sample whose patches alone are more than a
    batch may hold (the batch budget less the fixed fields) fails from its headers, before
    decoding; one whose patches would take its batch past that fails at its join, in slot
    order, so a smaller sample after it still fits; the batches delivered stay within."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images/big.png").write_bytes(png_bytes(1000, 1000, pixel=(0, 0, 0)))
    records = [("twelve", 12), ("eight", 8), ("two", 2), ("one", 1)]
    config = patch_pipeline(tmp_path, [{"id": name, "images": ["images/big.png"] * n}
                                       for name, n in records],
                            max_items=16, tail="errors: {max_error_rate: 0.9}\n"
                                               "trainer: {step_ms: 0}\n")
    report_path = tmp_path / "r.json"
    proc = run_headrace(headrace_bin, "run", config, "--report", report_path)
    out = proc.stdout + proc.stderr
    report = read_report(report_path)
    image = 5184 * 1176 * 4
    assert report["samples"] == 2, out  # "eight" and "one"
    assert report["errors"]["by_kind"] == {"resource_exhausted": 2}, out
    reasons = {e["index"]: e["reason"] for e in report["errors"]["first"]}
    # The batch budget less the fixed fields of a batch (its "index" and lengths: bytes).
    may_hold = int(re.search(r"more than a batch may hold \((\d+) bytes", reasons[0])[1])
    assert report["batch_budget_bytes"] - 4096 < may_hold <= report["batch_budget_bytes"]
    assert 8 * image + image <= may_hold < 8 * image + 2 * image, may_hold
    # Each sample's rows: its patches and its grid rows (24 bytes an image).
    told = re.search(r"the sample's rows told before decoding take (\d+) bytes, more than a "
                     r"batch may hold", reasons[0])
    assert told and int(told[1]) == 12 * (image + 24), reasons[0]
    joined = re.search(r"epoch 0, index 2, [^\n]*: resource_exhausted: the sample's rows "
                       r"\((\d+) bytes\) and those of the samples before it in its batch "
                       r"\((\d+) bytes\) are more than a batch may hold", out)
    assert joined and (int(joined[1]), int(joined[2])) == (2 * (image + 24), 8 * (image + 24))
    # Nothing of the twelve images was decoded: the image chain ran for the other three.
    (chain,) = [op for op in report["ops"] if "image.decode" in op["name"]]
    assert chain["latency_ms"]["count"] == 3, chain


def test_a_burst_of_large_samples_waits_for_the_batch_budget(tmp_path, headrace_bin):
    """Eight batches of small images, then four of 2 x 1000x1000 black PNGs (49 MB of
    patches a sample from 6 KB of files), to a slow trainer. Admission goes by the mean
    rows a sample so far, which the small ones keep low: the large samples' rows, told
    from their headers, wait for room in the batch budget before they decode (they were
    all decoded at once: peak RSS 608-837 MB against 531-578 MB now, budget 256 MiB)."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images/small.png").write_bytes(png_bytes(56, 56))
    (tmp_path / "images/big.png").write_bytes(png_bytes(1000, 1000, pixel=(0, 0, 0)))
    records = [{"id": f"s{i}", "images": ["images/small.png"]} for i in range(32)]
    records += [{"id": f"b{i}", "images": ["images/big.png"] * 2} for i in range(16)]
    config = patch_pipeline(tmp_path, records, max_items=4, tail="trainer: {step_ms: 200}\n")
    report_path = tmp_path / "r.json"
    proc = run_headrace(headrace_bin, "run", config, "--report", report_path)
    report = read_report(report_path)
    assert report["samples"] == 48 and report["errors"]["total"] == 0, proc.stderr[-2000:]
    assert report["batch_memory"]["rows_waits"] > 0, report["batch_memory"]
    assert report["batch_memory"]["rows_wait_s"] > 0
    # Charged as told: the budget, and past it at most the batch the trainer needs next.
    batch_rows = 4 * 2 * 5184 * 1176 * 4
    assert report["budget_peak_bytes"] <= report["memory_budget_bytes"] + batch_rows
