"""audio.decode -> audio.resample -> audio.crop end to end on make-sample's tones.

Sample i's WAV is 1.5 s of a 200 + 50 * (i % 12) Hz tone at 16 kHz. After decoding,
resampling to 8 kHz and cropping a random second, each row must still carry its own
sample's tone (counted from zero crossings), the length must say what is real, a
2-second crop must be zero-padded past 1.5 s, and the crop position must be seeded.
"""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import headrace

ops = headrace.ops
FIELDS = [{"name": "audio", "kind": "audio", "required": True},
          {"name": "conversation", "kind": "conversation", "key": "conversations"}]


@pytest.fixture(scope="module")
def tones(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tones")
    stats = headrace.make_sample(str(out), samples=24, seed=3, threads=2, audio=True)
    assert stats["audio_bytes"] > 0
    return out


def run(root, seconds, epochs=1, **kw):
    p = headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "fields": FIELDS},
        ops=[ops.audio_decode(channels=1), ops.audio_resample(sample_rate=8000),
             ops.audio_crop(seconds=seconds, start="random")],
        batch_size=8, seed=11, cpu_threads=2, memory_budget="64MiB", epochs=epochs, **kw)
    with headrace.Loader(p) as loader:
        return [[{k: np.asarray(v).copy() for k, v in b.items() if k != "id"} for b in loader]
                for _ in range(epochs)]


def zero_crossing_hz(x, rate):
    return np.count_nonzero(np.diff(np.signbit(x))) / 2 / (len(x) / rate)


def test_each_row_carries_its_own_tone(tones):
    (batches,) = run(tones, 1.0)
    seen = 0
    for b in batches:
        assert b["audio"].shape == (8, 1, 8000) and b["audio"].dtype == np.float32
        for row, index in enumerate(b["index"]):
            assert b["audio_length"][row] == 8000
            hz = 200 + 50 * (int(index) % 12)
            assert zero_crossing_hz(b["audio"][row, 0], 8000) == pytest.approx(hz, abs=6)
            seen += 1
    assert seen == 24


def test_a_longer_crop_is_padded_and_crops_are_seeded(tones):
    (padded,) = run(tones, 2.0)
    for b in padded:
        assert (b["audio_length"] == 12000).all()  # 1.5 s at 8 kHz
        assert not b["audio"][:, :, 12000:].any()
        assert (np.abs(b["audio"][:, 0, 5000:7000]).max(axis=1) > 0.3).all()
    first, second = run(tones, 0.5, epochs=2)
    again = run(tones, 0.5, epochs=1)[0]
    assert all(np.array_equal(a["audio"], b["audio"]) for a, b in zip(first, again))
    windows = [{int(i): b["audio"][r, 0] for b in e for r, i in enumerate(b["index"])}
               for e in (first, second)]
    moved = sum(not np.array_equal(windows[0][i], windows[1][i]) for i in range(24))
    assert moved >= 12, moved


def test_a_crop_needs_a_fixed_rate(tones):
    with pytest.raises(headrace.ConfigError,
                       match=r"ops\[1\].audio.crop: the sample rate of 'audio' varies"):
        headrace.Pipeline(
            source={"manifest": tones / "manifest.jsonl", "fields": FIELDS},
            ops=[ops.op("audio.decode", channels=1), ops.op("audio.crop", seconds=1.0)])


def test_a_crop_of_mp3_decodes_its_window_only_to_the_same_samples(tmp_path):
    """audio.decode -> audio.crop decodes about the window the crop keeps (the plan tells
    the decode which); a second crop after it makes the decode read whole files. The
    first crop's rows are the same, bit for bit, either way: MP3 (its bit reservoir),
    44.1 kHz stereo resampled to 16 kHz mono, over two epochs of random windows."""
    lines = []
    for i in range(6):
        path = tmp_path / f"song{i}.mp3"
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i",
                        f"sine=f={300 + 40 * i}:r=44100:d=3", "-f", "lavfi", "-i",
                        "anoisesrc=r=44100:d=3:a=0.1", "-filter_complex", "amix=inputs=2",
                        "-ac", "2", "-c:a", "libmp3lame", "-b:a", f"{(64, 128, 192)[i % 3]}k",
                        "-y", str(path)], check=True)
        lines.append(json.dumps({"id": str(i), "audio": path.name}))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")

    def crops(*extra):
        p = headrace.Pipeline(
            source={"manifest": tmp_path / "m.jsonl",
                    "fields": [{"name": "audio", "kind": "audio", "required": True}]},
            ops=[ops.audio_decode(channels=1, sample_rate=16000),
                 ops.audio_crop(seconds=1.0), *extra],
            batch_size=3, seed=5, cpu_threads=2, epochs=2, shuffle=False)
        with headrace.Loader(p) as loader:
            return [np.asarray(b["audio"]).copy() for _ in range(2) for b in loader]

    window = crops()
    whole = crops(ops.audio_crop(seconds=0.5, output="other"))
    assert len(window) == len(whole) == 4
    for a, b in zip(window, whole):
        assert a.shape == (3, 1, 16000)
        assert np.array_equal(a, b)
    assert not np.array_equal(window[0], window[2]), "epochs draw other windows"
