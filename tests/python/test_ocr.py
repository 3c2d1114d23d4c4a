"""image.decode -> ocr.text -> text.tokenize end to end on make-sample's OCR pages.

Sample i's page (ocr/<id>.png) shows two lines of known words and the number i; its
manifest line carries them as "ocr_text". Each row's recognized text (the
ocr_text_utf8 / ocr_text_length fields) must read its own page. The match is on words,
case-insensitively, with a high ratio over the dataset rather than exact equality: the
text is rendered cleanly with DejaVu Sans, and Tesseract 5's English model reads it
exactly today (the C++ test asserts exact words for its pages), but an OCR model's
output is a model's, and a newer traineddata may misread a glyph of one page; what this
test guards is that each row carries its own page's text, in order, through the engine.
"""
import re
from pathlib import Path

import numpy as np
import pytest

import headrace

ops = headrace.ops
SAMPLES = 12
FIELDS = [{"name": "image", "kind": "image", "key": "ocr_image", "required": True},
          {"name": "expected", "kind": "string", "key": "ocr_text"}]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ocr")
    stats = headrace.make_sample(str(out), samples=SAMPLES, seed=5, threads=2, ocr=True)
    assert stats["ocr_bytes"] > 0
    assert (out / "ocr" / "000003.png").exists()
    return out


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def run(root, **kw):
    p = headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "fields": FIELDS},
        ops=[ops.decode(),
             ops.ocr_text(max_bytes=96, **kw),
             ops.tokenize(model=str(root / "tokenizer.model"), field="ocr_text", max_length=48)],
        batch_size=4, seed=1, cpu_threads=2, memory_budget="64MiB")
    with headrace.Loader(p) as loader:
        return [{k: (np.asarray(v).copy() if k not in ("id", "expected") else list(v))
                 for k, v in b.items()} for b in loader]


def test_each_row_reads_its_own_page(pages):
    batches = run(pages)
    matched = total = rows = 0
    for b in batches:
        assert b["ocr_text_utf8"].dtype == np.uint8 and b["ocr_text_utf8"].shape[1] == 96
        for r, expected in enumerate(b["expected"]):
            n = int(b["ocr_text_length"][r])
            got = bytes(b["ocr_text_utf8"][r, :n]).decode("utf-8")
            assert not b["ocr_text_utf8"][r, n:].any(), "zero-padded past the length"
            want = words(expected)
            assert want[-1] == str(int(b["index"][r])), "the page names its own index"
            hits = sum(w in words(got) for w in want)
            assert hits >= len(want) - 1, (expected, got)  # a row reads its own page
            matched += hits
            total += len(want)
            rows += 1
            # The text went on to the tokenizer as the conversation's one (assistant)
            # turn: tokens, trained on (labels set), no padding inside.
            mask = b["attention_mask"][r]
            assert mask.sum() > 5
            assert (b["labels"][r][mask == 1] != -100).sum() >= len(want)
    assert rows == SAMPLES
    assert matched / total >= 0.95, f"{matched}/{total} words read"


def test_single_block_mode_reads_the_same_words(pages):
    auto = {int(i): bytes(b["ocr_text_utf8"][r]) for b in run(pages)
            for r, i in enumerate(b["index"])}
    block = {int(i): bytes(b["ocr_text_utf8"][r]) for b in run(pages, psm="single_block")
             for r, i in enumerate(b["index"])}
    same = sum(words(auto[i].decode()) == words(block[i].decode()) for i in auto)
    assert same >= SAMPLES - 1


def test_a_blank_page_is_empty_text_not_an_error(tmp_path):
    from PIL import Image

    Image.fromarray(np.full((120, 300), 255, np.uint8)).save(tmp_path / "blank.png")
    (tmp_path / "m.jsonl").write_text('{"id": "0", "ocr_image": "blank.png"}\n')
    out = tmp_path / "tok"  # any tokenizer will do
    headrace.make_sample(str(out), samples=2, seed=1, threads=1)
    p = headrace.Pipeline(
        source={"manifest": tmp_path / "m.jsonl", "fields": FIELDS[:1]},
        ops=[ops.decode(), ops.ocr_text(max_bytes=16),
             ops.tokenize(model=str(out / "tokenizer.model"), field="ocr_text", max_length=12)],
        batch_size=1)
    with headrace.Loader(p) as loader:
        (b,) = list(loader)
    assert int(np.asarray(b["ocr_text_length"])[0]) == 0
    assert not np.asarray(b["ocr_text_utf8"]).any()
    # BOS, the assistant prefix, the (empty) turn's end and EOS: a row, not an error.
    mask = np.asarray(b["attention_mask"])[0]
    assert 3 <= mask.sum() <= 6


def test_tesseract_starts_no_openmp_threads(pages):
    # Debian's libtesseract would start an OpenMP team of 3 more threads under each
    # engine thread that recognizes; ocr.text keeps it serial. Same engine, same thread
    # settings: the process holds as many threads with OCR as without.
    import os

    def threads_during(chain):
        p = headrace.Pipeline(source={"manifest": pages / "manifest.jsonl", "fields": FIELDS},
                              ops=chain, batch_size=2, cpu_threads=2, epochs=2)
        most = 0
        with headrace.Loader(p) as loader:
            for b in loader:
                most = max(most, len(os.listdir("/proc/self/task")))
        return most

    ocr = threads_during([ops.decode(), ops.ocr_text(max_bytes=16, write_turn=False)])
    plain = threads_during([ops.decode(), ops.resize(width=64, height=64), ops.normalize()])
    assert ocr <= plain + 1, (ocr, plain)


def test_bad_configs_name_the_key(pages):
    source = {"manifest": pages / "manifest.jsonl", "fields": FIELDS}
    # The tessdata is looked at when the pipeline is planned (the loader starts).
    p = headrace.Pipeline(source=source,
                          ops=[ops.decode(), ops.ocr_text(language="klingon", max_bytes=16,
                                                     write_turn=False)])
    with pytest.raises(headrace.ConfigError, match=r"ops\[1\]\.ocr\.text\.language: no "
                                                   r"klingon\.traineddata .*installed: .*eng"):
        with headrace.Loader(p) as loader:
            next(iter(loader))
    with pytest.raises(headrace.ConfigError, match=r"ocr\.text\.psm: unknown value 'sideways' "
                                                   r"\(allowed: auto_osd, auto, .*single_line"):
        headrace.Pipeline(source=source, ops=[ops.decode(), ops.ocr_text(psm="sideways")])
    with pytest.raises(headrace.ConfigError, match=r"reads 'image' as an image.*add image\.decode"):
        headrace.Pipeline(source=source, ops=[ops.ocr_text(max_bytes=16)])
    # A chain that ends at ocr.text: the planner rejects the turn dropped unread;
    # write_turn=False keeps only the batch fields.
    p = headrace.Pipeline(source=source, ops=[ops.decode(), ops.ocr_text(max_bytes=16)])
    with pytest.raises(headrace.ConfigError, match=r"writes 'ocr_text', which no later op reads"):
        with headrace.Loader(p) as loader:
            next(iter(loader))
    p = headrace.Pipeline(source=source,
                          ops=[ops.decode(), ops.ocr_text(max_bytes=16, write_turn=False)])
    with headrace.Loader(p) as loader:
        assert (np.asarray(next(iter(loader))["ocr_text_length"]) > 10).all()
