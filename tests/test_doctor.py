"""`headrace doctor`: pipelines whose bottleneck is known by construction get that verdict
and advice that names the setting with numbers. Each run is bounded (--seconds 2); no
assertion depends on how fast this machine is, only on which resource the construction
starves (reads held back by the server, a trainer slower than any pipeline, a budget that
holds one batch)."""
import json

from e2e_util import run_headrace, write_config
from s3_fixtures import fault_server  # noqa: F401  (fixture)


def doctor(headrace_bin, config, *args, check=True):
    proc = run_headrace(headrace_bin, "doctor", config, "--seconds", 2, "--json", *args,
                        check=check, timeout=120)
    return proc, (json.loads(proc.stdout) if proc.returncode == 0 else None)


def advice_for(diagnosis, setting):
    found = [a for a in diagnosis["advice"] if a.get("setting") == setting]
    assert found, diagnosis
    return found[0]


def evidence(diagnosis, name):
    return next(e for e in diagnosis["evidence"] if e["name"] == name)


def long_config(tmp_path, sample_dir, extra=""):
    """The test pipeline, with epochs enough to outlast the bounded run."""
    path = write_config(tmp_path / "c.yaml", sample_dir, extra=extra)
    path.write_text(path.read_text().replace("epochs: 1", "epochs: 1000"))
    return path


def test_few_reads_in_flight_against_a_slow_server_is_storage_latency(
        headrace_bin, sample_dir, tmp_path, fault_server):
    fault_server.latency = 0.05  # every response held back 50 ms
    config = long_config(
        tmp_path, sample_dir,
        extra=f"storage: {{endpoint: '{fault_server.endpoint}', anonymous: true}}\n")
    config.write_text(config.read_text().replace("source:\n", "source:\n  root: s3://bkt\n", 1))
    _, d = doctor(headrace_bin, config, "--set", "execution.io_inflight=2",
                  "--set", "trainer.step_ms=1")
    assert d["limit"] == "storage_latency", d
    assert d["stage"] == "read"
    assert evidence(d, "read_latency")["value"] >= 50
    assert evidence(d, "read_latency")["unit"] == "ms"
    a = advice_for(d, "execution.io_inflight")
    assert a["current"] == 2
    # Little's law: the trainer's reads/s x the measured latency, +25%.
    needed = evidence(d, "reads_in_flight_needed")["value"]
    assert a["suggested"] == max(3, min(16384, -(-needed * 1.25 // 1)))
    assert a["suggested"] > 2
    assert "raise execution.io_inflight from 2 to ~" in a["text"]


def test_a_slow_trainer_is_the_bottleneck_and_nothing_changes(headrace_bin, sample_dir,
                                                              tmp_path):
    config = long_config(tmp_path, sample_dir)
    report = tmp_path / "run-report.json"
    _, d = doctor(headrace_bin, config, "--set", "trainer.step_ms=300", "--report", report)
    assert d["limit"] == "consumer", d
    assert d["advice"] == []
    assert "nothing to change" in d["summary"]
    # At most 5%, or (on a busy machine) up to 25% while batches were ready when asked.
    assert evidence(d, "wait_time_ratio")["value"] <= 0.25
    # The saved report gives the same verdict without running.
    proc = run_headrace(headrace_bin, "doctor", "--from-report", report, "--json")
    again = json.loads(proc.stdout)
    assert again["limit"] == "consumer"
    assert again["evidence"] == d["evidence"]
    text = run_headrace(headrace_bin, "doctor", "--from-report", report).stdout
    assert text.startswith("Headrace doctor: consumer")
    assert "nothing to change" in text


def test_a_budget_of_one_batch_is_the_memory_budget(headrace_bin, sample_dir, tmp_path):
    config = long_config(tmp_path, sample_dir)
    # One sample per batch and a budget that holds one batch beside the I/O budget: one
    # sample is computed at a time while 4 threads could run 4.
    _, d = doctor(headrace_bin, config, "--set", "batch.size=1", "--set", "trainer.step_ms=1",
                  "--set", "execution.cpu_threads=4", "--set", "memory.budget_bytes=1950000",
                  "--set", "execution.io_budget_bytes=1900000")
    assert d["limit"] == "memory_budget", d
    assert evidence(d, "batches_ahead_budget_holds")["value"] == 1
    a = advice_for(d, "memory.budget_bytes")
    assert a["current"] == 1950000
    # prefetch.depth (4) full batches beside the I/O budget.
    full_batch = evidence(d, "full_batch")["value"]
    assert a["suggested"] >= 1900000 + 4 * full_batch
    assert "raise memory.budget_bytes from" in a["text"]


def test_bad_input_fails_before_any_run_naming_the_flag(headrace_bin, sample_dir, tmp_path):
    config = long_config(tmp_path, sample_dir)
    cases = [
        (["doctor", config, "--seconds", "0"], "--seconds needs a positive number"),
        (["doctor", config, "--seconds", "-3"], "--seconds needs a positive number"),
        (["doctor", config, "--bogus"], "unknown flag '--bogus'"),
        (["doctor", "--from-report", tmp_path / "missing.json"], "--from-report"),
        (["doctor", "--from-report", config], "--from-report"),
        (["doctor"], "give CONFIG or --from-report"),
        (["doctor", config, "--report", tmp_path / "a-file" / "r.json"], "--report"),
    ]
    (tmp_path / "a-file").write_text("")
    for args, message in cases:
        proc = run_headrace(headrace_bin, *args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
