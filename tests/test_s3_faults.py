"""Object storage under faults moto cannot make: our own HTTP server (s3_fixtures.FaultServer)
serves the sample dataset as s3://bkt/... and injects 503/SlowDown bursts, resets and
truncation mid-body, slow first bytes and per-request latency. The manifest is local and
its media are on the server (source.root: s3://bkt). Nothing may be lost: every sample
arrives exactly once (the batches equal local disk's), or is reported as an error."""
import time

import pytest

from e2e_util import read_report, run_headrace, write_config
from s3_fixtures import fault_server, free_port  # noqa: F401  (fixture)


def faulty_config(tmp_path, sample_dir, endpoint, storage="", extra=""):
    """The test pipeline with a local manifest whose media live on `endpoint` (s3://bkt)."""
    keys = (f"endpoint: '{endpoint}', anonymous: true, retry_base_ms: 1, retry_max_ms: 20"
            + (", " + storage if storage else ""))
    path = write_config(tmp_path / "faulty.yaml", sample_dir, extra=f"storage: {{{keys}}}\n{extra}")
    text = path.read_text()
    path.write_text(text.replace("source:\n", "source:\n  root: s3://bkt\n", 1))
    return path


@pytest.fixture(scope="module")
def local_digests(headrace_bin, sample_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    report = tmp / "r.json"
    run_headrace(headrace_bin, "run", write_config(tmp / "l.yaml", sample_dir), "--report", report,
                 "--digests", "--quiet")
    return read_report(report)["batch_digests"]


def run(headrace_bin, config, tmp_path, *args, check=True, quiet=True):
    report = tmp_path / "r.json"
    proc = run_headrace(headrace_bin, "run", config, "--report", report, "--digests",
                        *(["--quiet"] if quiet else []), *args, check=check, timeout=120)
    return proc, (read_report(report) if report.exists() else None)


def test_through_the_fault_server_without_faults(headrace_bin, sample_dir, tmp_path,
                                                 fault_server, local_digests):
    config = faulty_config(tmp_path, sample_dir, fault_server.endpoint)
    _, r = run(headrace_bin, config, tmp_path)
    assert r["errors"]["total"] == 0
    assert r["batch_digests"] == local_digests
    assert fault_server.requests_for("/bkt/images/000000.jpg") == 1


def test_bursts_resets_truncation_and_slow_first_bytes_lose_nothing(
        headrace_bin, sample_dir, tmp_path, fault_server, local_digests):
    script = {
        "/bkt/images/000001.jpg": ["503", "503", "503"],
        "/bkt/images/000002.jpg": ["500", "503"],
        "/bkt/images/000003.jpg": ["reset"],
        "/bkt/images/000004.jpg": ["truncate", "reset"],
        "/bkt/images/000005.jpg": [("slow", 1.0)],
    }
    for i in range(10, 40):  # a SlowDown burst over many objects at once
        script[f"/bkt/images/{i:06d}.jpg"] = ["503", "503"]
    fault_server.script = {k: list(v) for k, v in script.items()}
    config = faulty_config(tmp_path, sample_dir, fault_server.endpoint,
                           storage="first_byte_timeout_ms: 300, max_retries: 6")
    proc, r = run(headrace_bin, config, tmp_path, quiet=False)
    assert r["errors"]["total"] == 0
    assert r["samples"] == 48
    assert r["batch_digests"] == local_digests  # every sample exactly once, bytes intact
    for path, actions in script.items():
        assert fault_server.requests_for(path) == len(actions) + 1, path
    # The report counts every injected fault as a retry, by reason.
    injected = sum(len(actions) for actions in script.values())
    s3 = r["storage"]["s3"]
    assert s3["endpoint"] == fault_server.endpoint
    assert s3["retries"] == injected == 69
    by_reason = dict(s3["retries_by_reason"])
    # A reset after half the body reads as either, depending on when curl sees the RST.
    broken = by_reason.pop("reset", 0) + by_reason.pop("truncated", 0)
    assert broken == 3
    assert by_reason == {"SlowDown": 3 + 1 + 60, "InternalError": 1, "timeout": 1}
    assert s3["throttles"] == 64
    assert s3["requests"] == 48 + injected
    assert s3["errors"] == 0
    assert r["storage"]["local"]["reads"] == 2  # the manifest and the tokenizer model
    line = next(l for l in proc.stdout.splitlines() if f"s3 {fault_server.endpoint}:" in l)
    assert f"{48 + injected} requests, {injected} retries (InternalError=1, SlowDown=64" in line
    assert "64 throttled, 0 errors" in line


def test_retries_exhausted_become_the_samples_errors(headrace_bin, sample_dir, tmp_path,
                                                     fault_server):
    fault_server.script = {"/bkt/images/000007.jpg": ["always503"],
                           "/bkt/images/000008.jpg": ["alwaystruncate"]}
    config = faulty_config(tmp_path, sample_dir, fault_server.endpoint, storage="max_retries: 2")
    _, r = run(headrace_bin, config, tmp_path, "--set", "errors.max_error_rate=0.1")
    assert r["samples"] == 46
    assert r["errors"]["by_kind"] == {"io_error": 2}
    messages = " ".join(e["reason"] if "reason" in e else str(e) for e in r["errors"]["first"])
    assert "SlowDown" in messages and "3 attempts" in messages
    assert "truncated body" in messages and fault_server.endpoint in messages
    assert fault_server.requests_for("/bkt/images/000007.jpg") == 3
    s3 = r["storage"]["s3"]
    assert s3["errors"] == 2
    assert s3["retries_by_reason"] == {"SlowDown": 2, "truncated": 2}


def test_missing_object_is_not_retried(headrace_bin, sample_dir, tmp_path, fault_server):
    (tmp_path / "m").mkdir()
    manifest = (sample_dir / "manifest.jsonl").read_text().replace(
        '"images/000009.jpg"', '"images/nope.jpg"', 1)
    (tmp_path / "m" / "manifest.jsonl").write_text(manifest)
    config = faulty_config(tmp_path, sample_dir, fault_server.endpoint,
                           extra="errors: {max_error_rate: 0.1}")
    config.write_text(config.read_text().replace(str(sample_dir / "manifest.jsonl"),
                                                 str(tmp_path / "m" / "manifest.jsonl")))
    _, r = run(headrace_bin, config, tmp_path)
    assert r["errors"]["by_kind"] == {"not_found": 1}
    assert fault_server.requests_for("/bkt/images/nope.jpg") == 1


def test_per_request_latency_is_hidden_by_reads_in_flight(headrace_bin, sample_dir, tmp_path,
                                                          fault_server, local_digests):
    fault_server.latency = 0.05
    config = faulty_config(tmp_path, sample_dir, fault_server.endpoint)
    start = time.monotonic()
    _, r = run(headrace_bin, config, tmp_path)
    elapsed = time.monotonic() - start
    assert r["batch_digests"] == local_digests
    assert elapsed < 48 * 0.05  # far below one request after another


def test_dead_endpoint_fails_the_run_naming_it_and_never_hangs(headrace_bin, sample_dir,
                                                               tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    config = faulty_config(tmp_path, sample_dir, endpoint, storage="retry_budget: 20")
    start = time.monotonic()
    proc, _ = run(headrace_bin, config, tmp_path, "--set", "errors.min_samples=10", check=False)
    assert proc.returncode == 1
    assert time.monotonic() - start < 60
    assert endpoint in proc.stderr
    assert "retry budget exhausted" in proc.stderr or "attempts" in proc.stderr
    assert "connect" in proc.stderr.lower()


def test_manifest_on_a_dead_endpoint_fails_before_any_work(headrace_bin, sample_dir, tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    config = faulty_config(tmp_path, sample_dir, endpoint, storage="max_retries: 2")
    config.write_text(config.read_text().replace(str(sample_dir / "manifest.jsonl"),
                                                 "s3://bkt/manifest.jsonl"))
    proc, _ = run(headrace_bin, config, tmp_path, check=False)
    assert proc.returncode == 1
    assert "reading manifest" in proc.stderr and endpoint in proc.stderr
