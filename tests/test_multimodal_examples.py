"""The multimodal examples read what `make-sample --modalities all` writes (issue 11).

Each example over data/multimodal runs to its end over a fresh make-sample dataset with
every sample delivered and no error; the point clouds' PCD copies (ascii, binary and
binary_compressed in turn) give the KITTI .bin's batches byte for byte; with espeak-ng on
PATH the dataset has speech clips with their transcripts (examples/asr.yaml reads them),
and without it make-sample writes tones only and says so.
"""
import json
import os
import shutil
import subprocess

import pytest

from e2e_util import REPO, read_report, run_headrace

SAMPLES = 12
# The examples that read data/multimodal/manifest.jsonl (video_vqa_shards reads the
# shards: tests/test_shards.py).
EXAMPLES = ["video", "video_vqa", "audio", "audio_mel", "ocr", "pointcloud"]
ESPEAK = shutil.which("espeak-ng")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, headrace_bin):
    """A folder holding data/multimodal, as the examples expect it relative to the
    working directory."""
    cwd = tmp_path_factory.mktemp("multimodal")
    proc = run_headrace(headrace_bin, "make-sample", "--out", cwd / "data" / "multimodal",
                        "--samples", SAMPLES, "--seed", 2, "--modalities", "all")
    return cwd, proc


def manifest(cwd):
    lines = (cwd / "data" / "multimodal" / "manifest.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def run_example(headrace_bin, cwd, name, *sets):
    report = cwd / f"{name}-{len(sets)}.json"
    args = [str(headrace_bin), "run", str(REPO / "examples" / f"{name}.yaml"), "--quiet",
            "--digests", "--report", str(report), "--set", "shuffle=false",
            "--set", "execution.cpu_threads=2"]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name}: {proc.stderr}"
    return read_report(report)


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_reads_every_sample_make_sample_wrote(headrace_bin, workdir, name):
    cwd, _ = workdir
    got = run_example(headrace_bin, cwd, name)
    assert got["samples"] == SAMPLES, got["samples"]
    assert got["errors"]["total"] == 0, got["errors"]


def test_pcd_copies_give_the_kitti_batches(headrace_bin, workdir):
    cwd, _ = workdir
    records = manifest(cwd)
    heads = set()
    for r in records:
        with open(cwd / "data" / "multimodal" / r["pointcloud_pcd"], "rb") as f:
            head = f.read(400)
        heads.add(head[head.index(b"DATA "):].split(b"\n")[0].decode())
    assert heads == {"DATA ascii", "DATA binary", "DATA binary_compressed"}
    kitti = run_example(headrace_bin, cwd, "pointcloud")
    pcd = run_example(headrace_bin, cwd, "pointcloud", "source.fields.0.key=pointcloud_pcd",
                      "ops.0.pointcloud.read.format=pcd")
    assert pcd["samples"] == SAMPLES and pcd["errors"]["total"] == 0, pcd["errors"]
    assert pcd["batch_digests"] == kitti["batch_digests"]


@pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (scripts/setup.sh)")
def test_speech_clips_carry_their_transcripts(headrace_bin, workdir):
    cwd, proc = workdir
    assert "espeak-ng" not in proc.stderr, proc.stderr
    for r in manifest(cwd):
        assert r["speech"] == f"speech/{r['id']}.wav"
        assert (cwd / "data" / "multimodal" / r["speech"]).stat().st_size > 10000
        assert len(r["speech_text"].split()) == 5
        # The OCR page says the same words, then the sample number.
        assert r["ocr_text"].replace("\n", " ") == f"{r['speech_text']} {int(r['id'])}"
    got = run_example(headrace_bin, cwd, "asr")
    assert got["samples"] == SAMPLES and got["errors"]["total"] == 0, got["errors"]


def test_without_espeak_audio_is_tones_only_and_make_sample_says_so(headrace_bin, tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "empty"))  # no espeak-ng, nothing at all
    proc = run_headrace(headrace_bin, "make-sample", "--out", tmp_path / "d", "--samples", 2,
                        "--modalities", "audio", env=env)
    assert "espeak-ng is not on PATH: audio is tones only" in proc.stderr
    assert not (tmp_path / "d" / "speech").exists()
    for line in (tmp_path / "d" / "manifest.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert "speech" not in r and (tmp_path / "d" / r["audio"]).exists()
