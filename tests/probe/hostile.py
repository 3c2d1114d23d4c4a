"""The hostile-input probe of issue 50, rerun: each case a `headrace` run of its own under
a watchdog (wall time, and the peak RSS the kernel accounts for the child: os.wait4), then
a verdict: no signal, the exit code the case expects, within its time and memory, and for
runs that deliver, every sample either delivered or counted as an error (none lost).

    make probe-hostile            # or: .venv/bin/python tests/probe/hostile.py build/headrace

Not part of `make test` (a minute or two; each case's own test is in the suite: the
docstrings name them). Prints one line per case and exits 1 if any fails.
"""
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_bad_input import lopsided_blend, patch_pipeline, png_bytes, png_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def run_watched(binary, args, timeout):
    """Runs `binary args` (its output to $PROBE_LOG); returns (exit code or -signal, wall s,
    peak RSS bytes of the child, from its own rusage)."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: its output to a file, so that nothing blocks on a pipe
        with open(os.environ.get("PROBE_LOG", os.devnull), "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        os.execv(str(binary), [str(binary), *map(str, args)])
    deadline = start + timeout
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            done, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.02)  # polling the child's end, not a test's synchronisation
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    return code, wall, usage.ru_maxrss * 1024


def line_png(width, height):
    """A black RGB PNG `width` x `height` (a line: one of them small), compressed as it is
    made: its rows (a filter byte, then 3 bytes a pixel) are all zeros."""
    pack = zlib.compressobj(9)
    left, piece = height * (1 + 3 * width), bytes(1 << 22)
    body = b""
    while left:
        body += pack.compress(piece[:min(left, len(piece))])
        left -= min(left, len(piece))
    body += pack.flush()

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body)
            + chunk(b"IEND", b""))


def many_entries(root, n):
    """A blend of `n` entries, each the same 4 samples of data/sample (issue 50: 5,000
    entries took 52 s and 1.1 GB to load, 1,000 took 3.3 s)."""
    sample = ROOT / "data/sample"
    (root / "images").symlink_to(sample / "images")
    manifest = root / "four.jsonl"
    manifest.write_text("".join((sample / "manifest.jsonl").read_text().splitlines(True)[:4]))
    config = root / "many.yaml"
    entries = "".join(f"    - {{name: e{i}, manifest: {manifest}, weight: 1}}\n" for i in range(n))
    config.write_text("source:\n  mix:\n" + entries + "  until: first_exhausted\n"
                      "batch: {size: 4}\nepochs: 1\n"
                      "ops: [image.decode, {image.resize: {shorter_side: 32}}, "
                      "{image.center_crop: {size: 32}}, image.normalize]\n"
                      "trainer: {step_ms: 0}\n")
    return config


# The ops of the cases that decode an image and resize it to 8 x 8.
DECODE_TO_8X8 = "[image.decode, {image.resize: {width: 8, height: 8}}, image.normalize]"


def one_by_one(d, source, ops):
    """A run's config in `d`: `source` and `ops` (YAML flow text), one epoch in batches of
    one within a 256 MiB budget, any sample allowed to fail (its case counts them)."""
    config = d / "p.yaml"
    config.write_text(f"source: {source}\nepochs: 1\nbatch: {{size: 1}}\n"
                      f"memory: {{budget_bytes: 256MiB}}\nops: {ops}\n"
                      "errors: {max_error_rate: 1.0}\ntrainer: {step_ms: 0}\n")
    return config


def cases(root):
    """(name, args, expected exit codes, seconds, RSS bytes, records or None, its test)."""
    (root / "images").mkdir()
    images = root / "images"
    (images / "big.png").write_bytes(png_bytes(1000, 1000, pixel=(0, 0, 0)))
    (images / "small.png").write_bytes(png_bytes(56, 56))
    (images / "wide.png").write_bytes(png_header(1, 80_000_000))
    out = []
    for until in ("until: samples, samples: 68719476735", "until: samples, samples: 1000000000",
                  "until: all_exhausted"):
        d = root / f"blend{len(out)}"
        d.mkdir()
        config = lopsided_blend(d, ROOT / "data/sample/manifest.jsonl", until)
        out.append((f"blend {until.split(', ')[-1]}", ["run", config], {2}, 30,
                    512 * MiB, None, "test_a_blend_epoch_too_long_to_hold_exits_2_at_once"))
    for n, seconds in [(1000, 10), (5000, 50)]:  # linear: 5x the entries, about 5x the time
        d = root / f"many{n}"
        d.mkdir()
        out.append((f"a blend of {n:,} entries", ["run", many_entries(d, n)], {0}, seconds,
                    1024 * MiB, None, "tests/python/test_mix.py"))
    for name, records, max_items, tail, expected in [
        ("a 1 x 80,000,000 PNG header", [{"id": "wide", "images": ["images/wide.png"]},
                                         {"id": "ok", "images": ["images/small.png"]}],
         1, "errors: {max_error_rate: 0.9}\ntrainer: {step_ms: 0}\n", 2),
        ("patches past what a batch may hold",
         [{"id": n, "images": ["images/big.png"] * k}
          for n, k in [("twelve", 12), ("eight", 8), ("two", 2), ("one", 1)]],
         16, "errors: {max_error_rate: 0.9}\ntrainer: {step_ms: 0}\n", 4),
        ("a burst of large samples after small ones",
         [{"id": f"s{i}", "images": ["images/small.png"]} for i in range(32)] +
         [{"id": f"b{i}", "images": ["images/big.png"] * 2} for i in range(16)],
         4, "trainer: {step_ms: 100}\n", 48),
    ]:
        d = root / name.replace(" ", "_").replace(",", "")
        d.mkdir()
        (d / "images").symlink_to(images)
        config = patch_pipeline(d, records, max_items, tail)
        # 256 MiB of budget: twice it, and the process's own ~100 MiB.
        out.append((name, ["run", config, "--report", d / "r.json"], {0}, 120,
                    2 * 256 * MiB + 128 * MiB, (d / "r.json", expected),
                    "tests/test_bad_input.py"))
    # A PNG 1 pixel wide, and one 1 pixel tall, of image.decode's max_pixels (89,478,485
    # pixels, 348 KB). The tall one is decoded within max_pixels x 4 bytes and an eighth
    # (it took 2.9 GB: rows padded to 32 bytes), then resized to 8 x 8. The wide one took
    # 973 MiB, 626 MB of it libpng's two row buffers: now refused from its header (rows
    # wider than 5,592,405 pixels).
    for name, width, height in [("tall", 1, 89_478_485), ("wide", 89_478_485, 1)]:
        d = root / name
        d.mkdir()
        (d / "images").mkdir()
        (d / f"images/{name}.png").write_bytes(line_png(width, height))
        (d / "manifest.jsonl").write_text(
            json.dumps({"id": name, "image": f"images/{name}.png"}) + "\n")
        config = one_by_one(d, f"{{manifest: {d / 'manifest.jsonl'}, "
                               "fields: [{name: image, kind: image}]}",
                            DECODE_TO_8X8)
        # The decode's scratch (89,478,485 x 4.5 bytes) and the budget, with the process.
        # Until 2026-12-07 image.resize's filter tables for the 89,478,485 -> 8 reduction
        # took ~14 bytes a source row, kept by the thread (1.57 GB in all), then ~4 while
        # it ran (718 MiB); now an axis reduced past 64 taps has no tables (376 MiB).
        out.append((f"a {width:,} x {height:,} PNG", ["run", config, "--report", d / "r.json"],
                    {0}, 120, 384 * MiB + 256 * MiB + 128 * MiB, (d / "r.json", 1),
                    "resize_test.cc (long reductions), decode_test.cc (one pixel wide or tall)"))
    # Raw H.264 (no container) declaring 16000 x 16000 in its SPS, beside a small clip:
    # the probe that finds its size decodes under the allowance's pixels, and the sample
    # is refused with resource_exhausted (it decoded at full size: 2.3-3.8 GB a file).
    # ffmpeg (a Debian package scripts/setup.sh installs) encodes both, ~6 s and ~2 GB.
    d = root / "h264"
    d.mkdir()
    for name, size, seconds in [("big", "16000x16000", 0.04), ("small", "64x48", 0.4)]:
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"color=black:s={size}:d={seconds}", "-c:v", "libx264", "-preset",
                        "ultrafast", "-f", "h264", d / f"{name}.h264"], check=True)
    (d / "manifest.jsonl").write_text("".join(
        json.dumps({"id": k, "video": f"{k}.h264"}) + "\n" for k in ("big", "small")))
    config = one_by_one(d, f"{{manifest: {d / 'manifest.jsonl'}, "
                           "fields: [{name: video, kind: video}]}",
                        "[{video.decode: {frames: 4, width: 32, height: 24}}]")
    out.append(("raw H.264 with a 16000 x 16000 SPS", ["run", config, "--report", d / "r.json"],
                {0}, 60, 256 * MiB + 128 * MiB, (d / "r.json", 2),
                "decode_test.cc (VideoDecode, the allowance)"))
    # A tar shard whose member name is not UTF-8, beside a good one: that sample is a
    # bad_record and the report stays JSON (a Python loop died on UnicodeDecodeError,
    # and the report was not JSON).
    d = root / "tar"
    d.mkdir()
    with tarfile.open(d / "shard-0.tar", "w", format=tarfile.USTAR_FORMAT,
                      encoding="utf-8", errors="surrogateescape") as tar:
        for name in ("good.png", "b\udcffd.png"):
            info = tarfile.TarInfo(name)
            data = png_bytes(56, 56)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    config = one_by_one(d, f"{{shards: {d / 'shard-0.tar'}, "
                           "fields: [{name: image, kind: image, key: png}]}",
                        DECODE_TO_8X8)
    out.append(("a tar member name that is not UTF-8", ["run", config, "--report", d / "r.json"],
                {0}, 30, 256 * MiB, (d / "r.json", 2),
                "test_shards.py (a member name that is not UTF-8)"))
    # Vision tokens typed in the text: with one image, the sample fails (it was delivered
    # with 79 image tokens for 77 features); a second sample without them is delivered.
    d = root / "typed"
    d.mkdir()
    (d / "images").symlink_to(images)
    turns = {"typed": "<image>\n<|image_pad|><|image_pad|> What is this?",
             "plain": "<image>\nWhat is this?"}
    (d / "manifest.jsonl").write_text("".join(
        json.dumps({"id": k, "images": ["images/small.png"],
                    "conversations": [{"from": "human", "value": v},
                                      {"from": "gpt", "value": "A square."}]}) + "\n"
        for k, v in turns.items()))
    for name, pack in [("vision tokens typed in the text", ""),
                       ("batch.pack.field: labels", "  pack: {seq_len: 512, field: labels}\n")]:
        config = d / f"p{len(pack)}.yaml"
        config.write_text(f"""
source:
  manifest: {d / 'manifest.jsonl'}
  fields:
    - {{name: images, kind: image, key: images, max_items: 4}}
    - {{name: conversation, kind: conversation, key: conversations, required: true}}
epochs: 1
shuffle: false
batch:
  size: 2
{pack}ops:
  - image.decode: {{field: images}}
  - image.smart_resize: {{field: images, preset: qwen2_vl}}
  - vision.patchify: {{field: images, preset: qwen2_vl}}
  - text.tokenize:
      tokenizer: {ROOT / 'data/vocabs/qwen2/tokenizer.json'}
      preset: qwen2_vl
      grid_field: image_grid_thw
      pad: false
errors: {{max_error_rate: 0.9}}
trainer: {{step_ms: 0}}
""")
        if pack:
            out.append((name, ["run", config], {2}, 30, 512 * MiB, None,
                        "batch.pack.field checked at validation"))
        else:
            out.append((name, ["run", config, "--report", d / "r.json"], {0}, 60, 1024 * MiB,
                        (d / "r.json", 2), "hf_tokenizer_test.cc (typed image pads)"))
    return out


def main():
    binary = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build/headrace").resolve()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["PROBE_LOG"] = str(root / "probe.log")
        print(f"{'case':45} {'exit':>4} {'wall s':>7} {'peak RSS MiB':>13}  verdict")
        for name, args, codes, seconds, rss, report, test in cases(root):
            code, wall, peak = run_watched(binary, args, seconds)
            why = []
            if code < 0:
                why.append(f"signal {-code}")
            elif code not in codes:
                why.append(f"exit {code}, expected {sorted(codes)}")
            if wall > seconds:
                why.append(f"over {seconds} s")
            if peak > rss:
                why.append(f"RSS over {rss // MiB} MiB")
            r = None
            if report is not None and code == 0:
                path, records = report
                try:
                    r = json.loads(path.read_text(encoding="utf-8"))
                except ValueError as e:  # UnicodeDecodeError and JSONDecodeError
                    why.append(f"the report is not JSON: {e}")
                    r = None
            if r is not None:
                if name.startswith("vision tokens") and r["samples"] != 1:
                    why.append(f"{r['samples']} delivered: the typed one must fail")
                if r["samples"] + r["errors"]["total"] != records:
                    why.append(f"{r['samples']} delivered + {r['errors']['total']} errors "
                               f"of {records}")
            verdict = "ok" if not why else "FAIL: " + "; ".join(why)
            failed += bool(why)
            print(f"{name:45} {code:>4} {wall:>7.2f} {peak / MiB:>13.0f}  {verdict}")
    print(f"{failed} of the cases failed" if failed else "every case held")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
