"""Hostile media containers (issue 26): each is one sample's error, named, while the run
goes on and stays small. The files are made here with the ffmpeg command line and, for
the edit list, by rewriting an MP4's boxes."""
import json
import struct
import subprocess

from e2e_util import read_report, run_headrace


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-y", *map(str, args)], check=True)


def boxes(data, begin, end):
    """(type, start, size, header) of the MP4 boxes in data[begin:end]."""
    at = begin
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[at + 8:at + 16])[0], 16
        elif size == 0:
            size = end - at
        yield kind, at, size, header
        at += size


def with_edit_list(mp4: bytes, entries: int) -> bytes:
    """The MP4 with its first track's edit list replaced by one of `entries` entries
    (moov after mdat, as ffmpeg writes it, so no chunk offset moves)."""
    data = bytearray(mp4)
    path = []  # the moov, trak and edts boxes on the way: their sizes grow
    begin, end = 0, len(data)
    for want in (b"moov", b"trak", b"edts"):
        found = next(b for b in boxes(data, begin, end) if b[0] == want)
        path.append(found)
        begin, end = found[1] + found[3], found[1] + found[2]
    elst = next(b for b in boxes(data, begin, end) if b[0] == b"elst")
    body = struct.pack(">I", 0) + struct.pack(">I", entries) + \
        struct.pack(">IiI", 1000, 0, 1 << 16) * entries
    new = struct.pack(">I4s", 8 + len(body), b"elst") + body
    grow = len(new) - elst[2]
    data[elst[1]:elst[1] + elst[2]] = new
    for _, start, size, header in path:
        assert header == 8
        data[start:start + 4] = struct.pack(">I", size + grow)
    return bytes(data)


def config(path, manifest):
    path.write_text(f"""
source:
  manifest: {manifest}
  fields:
    - {{name: video, kind: video, required: true}}
batch: {{size: 2}}
shuffle: false
ops:
  - video.decode: {{frames: 2, width: 32, height: 24}}
execution: {{cpu_threads: 1}}
memory: {{budget_bytes: 128MiB}}
errors: {{max_error_rate: 0.5, min_samples: 1}}
""")
    return path


def test_many_streams_and_a_long_edit_list_fail_their_sample_only(headrace_bin, tmp_path):
    clip = tmp_path / "clip.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=10:duration=1", "-c:v", "libx264",
           "-bf", "0", "-use_editlist", "1", clip)
    streams = tmp_path / "streams.mkv"
    ffmpeg("-i", clip, "-f", "lavfi", "-i", "sine=duration=1", "-map", "0:v",
           *[a for _ in range(99) for a in ("-map", "1:a")], "-c:v", "copy", "-c:a", "pcm_s16le",
           streams)
    edits = tmp_path / "edits.mp4"
    edits.write_bytes(with_edit_list(clip.read_bytes(), 1_000_000))
    names = ["clip.mp4", "streams.mkv", "clip.mp4", "edits.mp4"]
    (tmp_path / "manifest.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "video": n}) + "\n" for i, n in enumerate(names)))
    report = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", config(tmp_path / "p.yaml", tmp_path / "manifest.jsonl"),
                 "--report", report)
    r = read_report(report)
    assert r["samples"] == 2
    reasons = {e["index"]: e["reason"] for e in r["errors"]["first"]}
    assert sorted(reasons) == [1, 3], reasons
    assert "more than 64 streams" in reasons[1], reasons
    assert "edit list declares 1000000 entries" in reasons[3], reasons
    # FFmpeg rebuilt the index per edit before: 572 MB for 1M entries.
    assert r["peak_rss_bytes"] < 200 << 20, r["peak_rss_bytes"]
