"""Hostile manifests and servers: media paths are literal object names on every backend,
symbolic links can be refused, an object's size is bounded, and the I/O budget holds.
A bad sample is skipped and counted by kind; nothing outside the dataset is delivered."""
import functools
import json
import posixpath
import shutil
import threading
import zlib
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from e2e_util import read_report, run_headrace, write_config


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


class _DecodingHandler(SimpleHTTPRequestHandler):
    """Python's file server: it decodes %XX and normalizes '..' before it looks a path up,
    as many real servers and proxies do. It also streams two hostile bodies: /endless
    (chunked, never ends) and /huge (announces 10 GB)."""
    protocol_version = "HTTP/1.1"
    requested: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).requested.append(self.path)
        name = self.path.rsplit("/", 1)[-1]
        if name == "endless.jpg":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"\xff" * 65536
            try:
                while True:  # until the client hangs up
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        if name == "huge.jpg":
            self.send_response(200)
            self.send_header("Content-Length", str(10 << 30))
            self.end_headers()
            try:
                self.wfile.write(b"\xff" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
            return
        super().do_GET()


@pytest.fixture
def http_root(tmp_path):
    """Serves tmp_path/www over HTTP; yields (base URL, document root, requested paths)."""
    root = tmp_path / "www"
    root.mkdir()
    handler_class = type("Handler", (_DecodingHandler,), {"requested": []})
    handler = functools.partial(handler_class, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root, handler_class.requested
    server.shutdown()
    server.server_close()


def copy_dataset(sample_dir, out, count=8):
    """The first `count` samples of sample_dir, with its tokenizer; returns their records."""
    (out / "images").mkdir(parents=True)
    good = [json.loads(l) for l in (sample_dir / "manifest.jsonl").read_text().splitlines()]
    good = good[:count]
    for rec in good:
        shutil.copy(sample_dir / rec["image"], out / rec["image"])
    shutil.copy(sample_dir / "tokenizer.model", out / "tokenizer.model")
    return good


def write_manifest(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def http_config(path, base, extra=""):
    path.write_text(f"""
source: {{manifest: "{base}/data/manifest.jsonl"}}
seed: 1
batch: {{size: 4}}
ops:
  - image.decode: {{}}
  - image.resize: {{shorter_side: 64}}
  - image.center_crop: {{size: 56}}
  - image.normalize: {{}}
  - text.tokenize: {{model: "{base}/data/tokenizer.model", max_length: 48}}
execution: {{cpu_threads: 2}}
memory: {{budget_bytes: 64MiB}}
storage: {{max_retries: 1}}
errors: {{max_error_rate: 0.5}}
{extra}
""")
    return path


def test_percent_encoded_traversal_over_http_never_leaves_the_prefix(
        http_root, headrace_bin, sample_dir, tmp_path):
    base, www, requested = http_root
    good = copy_dataset(sample_dir, www / "data")
    jpeg = (sample_dir / good[0]["image"]).read_bytes()
    (www / "secret.jpg").write_bytes(jpeg)  # outside the dataset's prefix /data
    (www / "private").mkdir()
    (www / "private" / "secret2.jpg").write_bytes(jpeg)
    # Names with URL syntax in them are ordinary objects inside the prefix.
    (www / "data" / "images" / "a#b.jpg").write_bytes(jpeg)
    (www / "data" / "images" / "a?x.jpg").write_bytes(jpeg)
    conv = good[0]["conversations"]
    hostile = ["%2e%2e/secret.jpg", "..%2fsecret.jpg", "images/..%2F..%2Fprivate%2Fsecret2.jpg"]
    literal = ["images/a#b.jpg", "images/a?x.jpg"]
    records = good + [{"id": f"h{i}", "image": p, "conversations": conv}
                      for i, p in enumerate(hostile + literal)]
    write_manifest(www / "data" / "manifest.jsonl", records)
    report_path = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", http_config(tmp_path / "p.yaml", base),
                 "--report", report_path)
    r = read_report(report_path)
    assert r["samples"] == len(good) + len(literal)
    assert r["errors"]["by_kind"] == {"not_found": len(hostile)}
    # What the server looked up after decoding: always inside /data, and each literal
    # name exactly.
    for path in requested:
        assert posixpath.normpath(unquote(path)).startswith("/data/"), path
    assert "/data/images/a%23b.jpg" in requested and "/data/images/a%3Fx.jpg" in requested


def test_nul_in_a_media_path_is_a_bad_record(headrace_bin, sample_dir, tmp_path):
    data = tmp_path / "d"
    good = copy_dataset(sample_dir, data)
    # Cut at the NUL, the path would name a good image.
    nul = {"id": "nul", "image": good[0]["image"] + "\u0000.png",
           "conversations": good[0]["conversations"]}
    write_manifest(data / "manifest.jsonl", good + [nul])
    report_path = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", write_config(tmp_path / "p.yaml", data, batch_size=4),
                 "--report", report_path, "--set", "errors.max_error_rate=0.5")
    r = read_report(report_path)
    assert r["samples"] == len(good)
    assert r["errors"]["by_kind"] == {"bad_record": 1}
    reason = r["errors"]["first"][0]["reason"]
    assert "NUL" in reason and f"line {len(good) + 1}" in reason


def test_symlinks_below_the_root_are_refused_when_not_followed(headrace_bin, sample_dir, tmp_path):
    data = tmp_path / "d"
    good = copy_dataset(sample_dir, data)
    secret = tmp_path / "secret.jpg"
    shutil.copy(sample_dir / good[0]["image"], secret)
    (data / "images" / "link.jpg").symlink_to(secret)
    (data / "linked").symlink_to(tmp_path)  # a folder on the way
    conv = good[0]["conversations"]
    links = [{"id": "l1", "image": "images/link.jpg", "conversations": conv},
             {"id": "l2", "image": "linked/secret.jpg", "conversations": conv}]
    write_manifest(data / "manifest.jsonl", good + links)
    config = write_config(tmp_path / "p.yaml", data, batch_size=4)
    followed = tmp_path / "followed.json"
    run_headrace(headrace_bin, "run", config, "--report", followed)
    assert read_report(followed)["samples"] == len(good) + 2  # the default follows links
    refused = tmp_path / "refused.json"
    run_headrace(headrace_bin, "run", config, "--report", refused,
                 "--set", "storage.follow_symlinks=false", "--set", "errors.max_error_rate=0.5")
    r = read_report(refused)
    assert r["samples"] == len(good)
    assert r["errors"]["by_kind"] == {"path_escape": 2}
    assert "storage.follow_symlinks" in r["errors"]["first"][0]["reason"]


def with_hostile_bodies(http_root, sample_dir):
    """The served dataset: good samples, then the /endless and /huge bodies as images;
    returns (base URL, the good records)."""
    base, www, _ = http_root
    good = copy_dataset(sample_dir, www / "data")
    conv = good[0]["conversations"]
    hostile = [{"id": "endless", "image": "images/endless.jpg", "conversations": conv},
               {"id": "huge", "image": "images/huge.jpg", "conversations": conv}]
    write_manifest(www / "data" / "manifest.jsonl", good + hostile)
    return base, good


def test_an_endless_or_huge_http_body_fails_at_max_object_bytes(http_root, headrace_bin,
                                                                  sample_dir, tmp_path):
    base, good = with_hostile_bodies(http_root, sample_dir)
    report_path = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", http_config(tmp_path / "p.yaml", base),
                 "--report", report_path, "--set", "storage.max_object_bytes=4MiB")
    r = read_report(report_path)
    assert r["samples"] == len(good)
    assert r["errors"]["by_kind"] == {"resource_exhausted": 2}
    for e in r["errors"]["first"]:
        assert "storage.max_object_bytes" in e["reason"] and "4194304" in e["reason"]
    # The endless body was cut near the limit, not read for gigabytes.
    assert r["storage"]["http"]["bytes"] < 64 << 20


def test_an_endless_body_fails_at_the_io_budget_by_default(http_root, headrace_bin,
                                                           sample_dir, tmp_path):
    """With no storage.max_object_bytes, an object is held to what the I/O budget allows
    (64 MiB: 8 MiB of it): the endless body fails there, naming the object, its size so
    far and the budget; the run's RSS stays near the budget, not past 1 GiB as before."""
    base, good = with_hostile_bodies(http_root, sample_dir)
    report_path = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", http_config(tmp_path / "p.yaml", base),
                 "--report", report_path)
    r = read_report(report_path)
    assert r["samples"] == len(good)
    assert r["errors"]["by_kind"] == {"resource_exhausted": 2}
    reasons = {e["uri"].rsplit("/", 1)[-1][:-4]: e["reason"] for e in r["errors"]["first"]}
    # The endless body grows until it passes the I/O budget; the announced 10 GB passes
    # the storage's cap first (storage.max_object_bytes, by default 1 GiB here).
    assert "endless.jpg" in reasons["endless"] and "I/O budget of 8388608 bytes" in reasons["endless"]
    assert "10737418240 bytes" in reasons["huge"] and "1073741824" in reasons["huge"]
    assert "memory.budget_bytes" in reasons["huge"], reasons
    assert 0 < r["budget_peak_bytes"] <= r["memory_budget_bytes"]
    assert r["storage"]["http"]["bytes"] < 16 << 20
    assert r["peak_rss_bytes"] < 400 << 20, r["peak_rss_bytes"]


def big_png(width, height):
    """An RGB PNG stored without compression (about width * height * 3 bytes)."""
    raw = b"".join(b"\x00" + bytes((x * 7 + y) % 256 for x in range(width * 3))
                   for y in range(height))

    def chunk(kind, body):
        return (len(body).to_bytes(4, "big") + kind + body
                + zlib.crc32(kind + body).to_bytes(4, "big"))

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 0))
            + chunk(b"IEND", b""))


def test_io_budget_peak_stays_within_the_memory_budget(headrace_bin, sample_dir, tmp_path):
    data = tmp_path / "d"
    good = copy_dataset(sample_dir, data, count=1)
    png = big_png(640, 640)  # ~1.2 MB, over half the 2 MiB I/O budget (16 MiB / 8)
    records = []
    for i in range(24):
        (data / "images" / f"big{i}.png").write_bytes(png)
        records.append({"id": f"b{i}", "image": f"images/big{i}.png",
                        "conversations": good[0]["conversations"]})
    write_manifest(data / "manifest.jsonl", records)
    report_path = tmp_path / "r.json"
    # One CPU thread and batches of 8: reads outrun decoding, so fetched bytes pile up
    # (charged on arrival, they reached ~23 MB against 16 MiB).
    run_headrace(headrace_bin, "run", write_config(tmp_path / "p.yaml", data, batch_size=8),
                 "--report", report_path, "--set", "memory.budget_bytes=16MiB",
                 "--set", "execution.cpu_threads=1")
    r = read_report(report_path)
    assert r["samples"] == 24
    assert r["memory_budget_bytes"] == 16 << 20
    assert 0 < r["budget_peak_bytes"] <= r["memory_budget_bytes"]
