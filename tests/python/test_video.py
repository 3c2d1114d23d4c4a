"""video.decode end to end: make-sample's H.264 clips through a real pipeline.

Each sample has a clip of its scene (160x120, 20 frames at 10 fps, panning across the
drawing with wrap-around, so every frame holds the same pixels shifted) and a still of
the same scene. Checked: the batch layout, content (frames as the ffmpeg command line
decodes them), that clips are seeded per sample (the same run twice is identical, another
epoch differs, a resumed loader is identical), and that a corrupt clip skips only its
sample, named.
"""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import headrace

ops = headrace.ops
FIELDS = [{"name": "video", "kind": "video", "required": True},
          {"name": "image", "kind": "image"},
          {"name": "conversation", "kind": "conversation", "key": "conversations"}]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clips")
    stats = headrace.make_sample(str(out), samples=24, seed=2, threads=2, video=True)
    assert stats["video_bytes"] > 0
    return out


def pipeline(root: Path, manifest: str = "manifest.jsonl", **kw):
    return headrace.Pipeline(
        source={"manifest": root / manifest, "fields": FIELDS},
        ops=[ops.video_decode(frames=4, width=80, height=60, clip_seconds=1.0),
             ops.decode(), ops.resize(width=80, height=60), ops.normalize()],
        batch_size=6, seed=7, cpu_threads=2, memory_budget="64MiB", **kw)


def batches(p):
    return epochs(p, 1)[0]


def test_frames_land_as_uint8_tchw_and_match_the_ffmpeg_cli(clips):
    got = batches(pipeline(clips, shuffle=False))
    assert len(got) == 4
    for b in got:
        assert b["video"].shape == (6, 4, 3, 60, 80) and b["video"].dtype == np.uint8
        assert b["image"].shape == (6, 3, 60, 80)
        # The clip moves: its frames are not all the same.
        assert (np.abs(b["video"][:, 0].astype(int) - b["video"][:, 3].astype(int))
                .mean(axis=(1, 2, 3)) > 2).all()
    # At the clip's own size, its first frames are what the ffmpeg command line decodes,
    # within the rounding of two YUV->RGB conversions (their chroma upsampling differs
    # at sharp colour edges: a few pixels there differ more).
    native = headrace.Pipeline(
        source={"manifest": clips / "manifest.jsonl", "fields": FIELDS},
        ops=[ops.video_decode(frames=4, width=160, height=120, fps=10, clip_seconds=1.0,
                              clip_start="start")],
        batch_size=3, cpu_threads=2, memory_budget="64MiB", shuffle=False)
    with headrace.Loader(native) as loader:
        first = np.asarray(next(iter(loader))["video"]).copy()
    for row in range(3):
        clip = clips / json.loads((clips / "manifest.jsonl").read_text().splitlines()[row])["video"]
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(clip), "-frames:v", "4",
                              "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                             check=True, capture_output=True).stdout
        reference = np.frombuffer(raw, np.uint8).reshape(4, 120, 160, 3).transpose(0, 3, 1, 2)
        diff = np.abs(first[row].astype(int) - reference.astype(int))
        assert diff.mean() < 2 and (diff > 12).mean() < 0.03, (diff.mean(), (diff > 12).mean())


def epochs(p, n):
    """The batches of `n` epochs (a for-loop each) of one loader."""
    with headrace.Loader(p) as loader:
        return [[{k: np.asarray(v).copy() for k, v in b.items() if k != "id"} for b in loader]
                for _ in range(n)]


def test_clips_are_seeded_per_sample_and_epoch(clips):
    first = epochs(pipeline(clips, epochs=2), 2)
    again = epochs(pipeline(clips, epochs=2), 2)
    for e in range(2):
        assert all(np.array_equal(a["video"], b["video"]) for a, b in zip(first[e], again[e]))
    # Epoch 1 visits the same samples with other random clips.
    by_index = [{int(i): b["video"][row] for b in first[e] for row, i in enumerate(b["index"])}
                for e in range(2)]
    assert sorted(by_index[0]) == sorted(by_index[1]) == list(range(24))
    differ = sum(not np.array_equal(by_index[0][i], by_index[1][i]) for i in range(24))
    assert differ >= 12, differ
    # A loader resumed after two batches yields the rest of the epoch, identical.
    with headrace.Loader(pipeline(clips, epochs=2)) as loader:
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
    resumed = headrace.Loader(pipeline(clips, epochs=2))
    resumed.load_state_dict(state)
    with resumed:
        rest = [np.asarray(b["video"]).copy() for b in resumed]
    assert len(rest) == len(first[0]) - 2
    assert all(np.array_equal(r, f["video"]) for r, f in zip(rest, first[0][2:]))


def test_a_corrupt_clip_skips_only_its_sample(clips, tmp_path):
    lines = (clips / "manifest.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.mp4"
    good = (clips / json.loads(lines[3])["video"]).read_bytes()
    bad.write_bytes(good[: len(good) // 2])  # the index (moov) is at the end: cut off
    r = json.loads(lines[3])
    r["video"] = str(bad)
    lines[3] = json.dumps(r)
    for i, line in enumerate(lines):
        r = json.loads(line)
        if i != 3:
            r["video"] = str(clips / r["video"])
        r["image"] = str(clips / r["image"])
        lines[i] = json.dumps(r)
    (tmp_path / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    p = headrace.Pipeline(
        source={"manifest": tmp_path / "manifest.jsonl", "fields": FIELDS,
                "allow_absolute_paths": True, "root": "/"},
        ops=[ops.video_decode(frames=2, width=32, height=24)],
        batch_size=6, seed=7, cpu_threads=2, memory_budget="64MiB", shuffle=False,
        overrides={"errors.max_error_rate": 0.5})
    rows, errors = 0, []
    with headrace.Loader(p) as loader:
        for b in loader:
            rows += len(b["index"])
            errors += b.errors
    assert rows == 23
    assert len(errors) == 1 and "index 3" in errors[0] and "corrupt_data" in errors[0], errors


def test_frames_spread_over_a_long_clip_are_the_frames_shown_at_their_times(tmp_path):
    """A 10 s clip as the ffmpeg command line writes it (x264 with B-frames, a keyframe
    every second, an MP4 edit list): frames spread over it skip ahead by seeking to
    keyframes, and each is still exactly the frame the ffmpeg CLI decodes at that time."""
    clip = tmp_path / "long.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i",
                    "testsrc2=s=160x96:r=30:d=10", "-c:v", "libx264", "-g", "30",
                    "-pix_fmt", "yuv420p", "-y", str(clip)], check=True)
    raw = subprocess.run(["ffmpeg", "-v", "error", "-threads", "1", "-i", str(clip), "-f",
                          "rawvideo", "-pix_fmt", "rgb24", "-"], check=True,
                         capture_output=True).stdout
    every = np.frombuffer(raw, np.uint8).reshape(-1, 96, 160, 3)
    assert len(every) == 300
    (tmp_path / "m.jsonl").write_text(json.dumps({"id": "0", "video": "long.mp4"}) + "\n")
    for frames in (3, 8, 16):
        p = headrace.Pipeline(
            source={"manifest": tmp_path / "m.jsonl",
                    "fields": [{"name": "video", "kind": "video", "required": True}]},
            ops=[ops.video_decode(frames=frames, width=160, height=96, layout="thwc")],
            batch_size=1, cpu_threads=1, shuffle=False, seed=0)
        got = np.asarray(batches(p)[0]["video"])[0]
        # Frame i shows at (i + 0.5) / frames of the 10 s: source frame floor(t * 30).
        want = [int((i + 0.5) / frames * 10 * 30 + 1e-6) for i in range(frames)]
        for i, w in enumerate(want):
            diff = np.abs(got[i].astype(int) - every[w].astype(int)).mean()
            assert diff < 1.0, (frames, i, w, diff)


def test_seek_keyframe_decodes_one_frame_per_frame_taken_and_the_report_says_so(clips):
    # make-sample's clips: 20 frames at 10 fps, a keyframe every 5 frames (0.5 s).
    def run(seek):
        p = headrace.Pipeline(
            source={"manifest": clips / "manifest.jsonl", "fields": FIELDS},
            ops=[ops.video_decode(frames=4, width=80, height=60, seek=seek)],
            batch_size=6, cpu_threads=2, memory_budget="64MiB", shuffle=False, epochs=2)
        with headrace.Loader(p) as loader:  # the report of a running engine: in epoch 1
            it = iter(loader)
            videos = [np.asarray(next(it)["video"]).copy() for _ in range(4)]
            op = next(o for o in loader.report()["ops"] if o["name"] == "video.decode")
        return np.concatenate(videos), op

    exact, exact_op = run("exact")
    key, key_op = run("keyframe")
    assert key.shape == exact.shape == (24, 4, 3, 60, 80)
    # (The engine may have run ahead into the next epoch: at least the first's frames.)
    assert key_op["frames_taken"] >= 24 * 4 and exact_op["frames_taken"] >= 24 * 4
    # Keyframes only: at most one decoded per frame taken; the exact decode needs more.
    assert key_op["frames_decoded_per_taken"] <= 1.0
    assert exact_op["frames_decoded_per_taken"] > key_op["frames_decoded_per_taken"]
    # The frames taken are keyframes near the times, not the frames shown then.
    assert (key != exact).any()
    with pytest.raises(headrace.Error, match=r"seek.*exact, keyframe"):
        headrace.Pipeline(source={"manifest": clips / "manifest.jsonl", "fields": FIELDS},
                          ops=[ops.video_decode(seek="nearest")], batch_size=2)


def test_read_ranges_gives_the_frames_of_whole_reads_and_reports_its_reads(clips):
    # video.decode(read="ranges") from Python: the clips' frames as whole reads give them,
    # read through the engine's ranged readers (the run report's ranged_reads).
    def run(read):
        p = headrace.Pipeline(
            source={"manifest": clips / "manifest.jsonl", "fields": FIELDS[:1]},
            ops=[ops.video_decode(frames=4, width=80, height=60, clip_seconds=1.0, read=read)],
            batch_size=6, seed=3, cpu_threads=2, memory_budget="64MiB", shuffle=False, epochs=2)
        with headrace.Loader(p) as loader:  # the report of a running engine: in epoch 1
            it = iter(loader)
            videos = np.concatenate([np.asarray(next(it)["video"]).copy() for _ in range(4)])
            report = loader.report()
        return videos, report

    whole, whole_report = run("whole")
    ranged, ranged_report = run("ranges")
    assert ranged.shape == whole.shape == (24, 4, 3, 60, 80)
    assert np.array_equal(ranged, whole)
    assert "ranged_reads" not in whole_report
    # (The engine may have run ahead into the next epoch: at least the first's samples.)
    reads = ranged_report["ranged_reads"]
    assert reads["requests"] >= 24 and reads["unplanned"] == 0
    assert 0 < reads["bytes"] <= ranged_report["storage"]["local"]["bytes"]
    with pytest.raises(headrace.Error, match=r"read.*whole, ranges"):
        headrace.Pipeline(source={"manifest": clips / "manifest.jsonl", "fields": FIELDS},
                          ops=[ops.video_decode(read="some")], batch_size=2)
