"""Data lost to packing is counted as data loss (issue 47).

Samples longer than batch.pack.seq_len (or batch.max_tokens) that the packer leaves out
(`overflow: skip`) or cuts (`overflow: truncate`) are failed samples of their own kinds,
pack_skipped and pack_truncated: against errors.max_error_rate (a run past it fails,
naming the kinds and the keys), in the batch's errors, the run report (JSON and text),
`Loader.stats()`, `TorchLoader.stats()`, the Prometheus metrics and the doctor; planned
(rows chosen from the told sizes) and after the samples ran, packed rows and token
budgets alike. `Loader.report()` stays readable after a bounded run's last epoch, and
`headrace run` gives no tuning advice on a failed run, its failure a line of its own.
"""
import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

import headrace
from conftest import fetch_vocabs
from headrace.torch import TorchLoader

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("HEADRACE_BIN", str(REPO / "build" / "headrace"))
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
SAMPLES = 50
LONG = {i for i in range(SAMPLES) if i % 5 == 2}  # 10 of 50 longer than SEQ_LEN
SEQ_LEN = 1024

fetch_vocabs()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack_loss")
    lines = []
    for i in range(SAMPLES):
        words = 1500 if i in LONG else 20 + i
        lines.append(json.dumps({"id": f"s{i:02d}", "conversations": [
            {"from": "human", "value": "why " * words},
            {"from": "gpt", "value": "Because."}]}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root


def flag(sample):
    return {"flag": [1]}


def pipeline(root, overflow="skip", max_tokens=None, max_error_rate=None, after=False):
    chain = [ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE,
                          pad=False, max_length=4096)]
    if after:
        # A Python op before the tokenizer: the size pass cannot tell the tokens, so the
        # packer chooses the rows after the samples ran (exec/packer.h, "Where").
        chain.insert(0, ops.map(flag, {"flag": ("i32", [1])}))
    pack = {"window": 0, "overflow": overflow}
    if max_tokens is None:
        pack["seq_len"] = SEQ_LEN
    overrides = {"errors.max_error_rate": max_error_rate} if max_error_rate is not None else None
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root,
                "fields": [{"name": "conversation", "kind": "conversation",
                            "key": "conversations"}]},
        ops=chain, batch_size=10, seed=3, epochs=1, cpu_threads=1, pack=pack,
        max_tokens=max_tokens, overrides=overrides)


def kind_of(error):
    return "pack_truncated" if "pack_truncated" in error else \
        "pack_skipped" if "pack_skipped" in error else "other"


@pytest.mark.parametrize("after", [False, True], ids=["planned", "after"])
@pytest.mark.parametrize("overflow", ["skip", "truncate"])
def test_samples_the_packer_drops_or_cuts_fail_the_run_past_max_error_rate(dataset, overflow,
                                                                           after):
    kind = "pack_skipped" if overflow == "skip" else "pack_truncated"
    with headrace.Loader(pipeline(dataset, overflow, after=after)) as loader:
        with pytest.raises(headrace.Error) as failed:
            for _ in loader:
                pass
        message = str(failed.value)
        assert "too many bad samples: 10 of 50 samples failed (20%)" in message, message
        assert "errors.max_error_rate 5%" in message and f"{kind}=10" in message, message
        assert "batch.pack.seq_len" in message, message
        stats = loader.stats()
    assert stats["samples_failed"] == 10 and stats[f"errors.{kind}"] == 10, stats


@pytest.mark.parametrize("after", [False, True], ids=["planned", "after"])
@pytest.mark.parametrize("overflow", ["skip", "truncate"])
def test_within_the_budget_the_loss_is_counted_by_kind_everywhere(dataset, overflow, after):
    kind = "pack_skipped" if overflow == "skip" else "pack_truncated"
    seen, delivered = {}, set()
    spec = pipeline(dataset, overflow, max_error_rate=0.5, after=after)
    with headrace.Loader(spec, metrics_port="127.0.0.1:0") as loader:
        torch_loader = TorchLoader(loader, device="cpu")
        for batch in torch_loader:
            delivered |= set(batch["id"])
        stats, torch_stats = loader.stats(), torch_loader.stats()
        metrics = urllib.request.urlopen(loader.metrics_url, timeout=10).read().decode()
        report = loader.report()  # the run ended with its last epoch: still readable
    ids = {f"s{i:02d}" for i in LONG}
    if overflow == "skip":
        assert delivered.isdisjoint(ids) and len(delivered) == SAMPLES - len(LONG)
    else:
        assert ids <= delivered and len(delivered) == SAMPLES
    for s in (stats, torch_stats):
        assert s["samples_failed"] == 10 and s[f"errors.{kind}"] == 10, s
        assert s[f"pack_{'skipped' if overflow == 'skip' else 'truncated'}"] == 10, s
    assert report["errors"]["total"] == 10
    assert report["errors"]["by_kind"] == {kind: 10}
    assert {e["kind"] for e in report["errors"]["first"]} == {kind}
    assert report["pack"]["skipped" if overflow == "skip" else "truncated"] == 10
    assert re.search(rf'headrace_errors_total{{[^}}]*kind="{kind}"[^}}]*}} 10', metrics), metrics
    outcome = "skipped" if overflow == "skip" else "truncated"
    assert re.search(rf'headrace_pack_samples_total{{[^}}]*outcome="{outcome}"[^}}]*}} 10',
                     metrics)


def test_each_lost_sample_is_named_in_its_batch(dataset):
    errors = []
    with headrace.Loader(pipeline(dataset, "truncate", max_error_rate=0.5)) as loader:
        for batch in loader:
            errors += batch.errors
    assert len(errors) == 10 and {kind_of(e) for e in errors} == {"pack_truncated"}
    assert all("exceed batch.pack.seq_len 1024: cut to 1024" in e for e in errors), errors
    assert {re.search(r"index (\d+)", e).group(1) for e in errors} == {str(i) for i in LONG}


@pytest.mark.parametrize("after", [False, True], ids=["planned", "after"])
def test_a_token_budget_counts_the_samples_it_cannot_hold(dataset, after):
    with headrace.Loader(pipeline(dataset, "skip", max_tokens=SEQ_LEN, after=after)) as loader:
        with pytest.raises(headrace.Error, match=r"pack_skipped=10.*batch\.max_tokens"):
            for _ in loader:
                pass
    errors = []
    spec = pipeline(dataset, "skip", max_tokens=SEQ_LEN, max_error_rate=0.5, after=after)
    with headrace.Loader(spec) as loader:
        for batch in loader:
            errors += batch.errors
        assert loader.report()["errors"]["by_kind"] == {"pack_skipped": 10}
    assert all("exceed batch.max_tokens 1024: left out" in e for e in errors), errors


def test_report_is_readable_after_the_last_epoch(dataset):
    loader = headrace.Loader(pipeline(dataset, "truncate", max_error_rate=0.5))
    batches = sum(1 for _ in loader)
    report = loader.report()
    assert report["batches"] == batches and report["errors"]["total"] == 10
    loader.close()
    assert loader.report()["batches"] == batches


def test_headrace_run_fails_without_advice_and_says_so_on_a_line_of_its_own(dataset, tmp_path):
    config = tmp_path / "pack.yaml"
    config.write_text(pipeline(dataset, "skip").to_yaml())
    out = tmp_path / "report.json"
    proc = subprocess.run([BIN, "run", str(config), "--report", str(out), "--progress", "0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "errors            10 pack_skipped=10" in proc.stdout, proc.stdout
    assert "(no advice: the run failed)" in proc.stdout, proc.stdout
    report = json.loads(out.read_text())
    assert report["advice"] == "" and "too many bad samples" in report["failure"]
    # Both streams into one file: the whole report first, then the failure on its own line.
    both = subprocess.run(f"'{BIN}' run '{config}' --progress 0 2>&1", shell=True,
                          capture_output=True, text=True, timeout=300).stdout
    lines = both.splitlines()
    failure = [line for line in lines if "headrace run: failed:" in line]
    assert len(failure) == 1 and failure[0].startswith("headrace run: failed: resource_exhausted")
    assert lines.index(failure[0]) > max(i for i, line in enumerate(lines)
                                         if line.startswith("  bottleneck"))
    # Within the budget the run passes, and the doctor names the loss and the key.
    config.write_text(pipeline(dataset, "skip", max_error_rate=0.5).to_yaml())
    proc = subprocess.run([BIN, "run", str(config), "--report", str(out), "--progress", "0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no advice" not in proc.stdout
    doctor = subprocess.run([BIN, "doctor", "--from-report", str(out), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 0, doctor.stderr
    advice = [a["text"] for a in json.loads(doctor.stdout)["advice"]]
    assert any("data lost to packing" in a and "10 were skipped" in a for a in advice), advice
