"""text.tokenize's `tokenizer:` (a Hugging Face tokenizer.json and the model's chat
template) against the references: the `tokenizers` package for ids, transformers'
apply_chat_template for rendered templates.

The tokenizers are trained here, in the configuration Qwen2 and Llama 3 ship
(tools/make_hf_tokenizer.py), on generated multilingual text.
"""
import json
import random
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

import headrace
from headrace import _headrace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import make_hf_tokenizer as mht  # noqa: E402
from hard_text import insert_bad_bytes  # noqa: E402

# Not importorskip: the references are requirements (requirements-dev.txt); a missing
# one must fail the suite.
import tokenizers  # noqa: E402
import transformers  # noqa: E402

STYLES = ["qwen2", "llama3"]
IGNORE = -100


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{style: folder with tokenizer.json and tokenizer_config.json}."""
    corpus = mht.make_corpus(3000, seed=1)
    out = {}
    for style in STYLES:
        folder = tmp_path_factory.mktemp(style)
        mht.write(style, folder, corpus, vocab_size=3000)
        out[style] = folder
    return out


def _texts(style, n, seed):
    """n byte strings: generated text, some with the style's special tokens spliced in,
    some with invalid UTF-8 inserted."""
    rng = random.Random(seed)
    specials = mht.QWEN2_SPECIAL if style == "qwen2" else mht.LLAMA3_SPECIAL
    bad_bytes = [b"\xff", b"\xc3", b"\xe2\x82", b"\x80", b"\xf0\x9f\x98", b"\xed\xa0\x80",
                 b"\xc0\xaf", b"\xfe\xfe"]
    out = []
    for i in range(n):
        text = mht.make_text(rng)
        if i % 3 == 1:
            cut = rng.randint(0, len(text))
            text = text[:cut] + rng.choice(specials) + text[cut:] + rng.choice(specials)
        data = bytearray(text.encode())
        if i % 3 == 2:
            insert_bad_bytes(rng, data, bad_bytes)
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("style", STYLES)
def test_ids_equal_tokenizers_on_10000_strings(trained, style):
    path = trained[style] / "tokenizer.json"
    ref = tokenizers.Tokenizer.from_file(str(path))
    ours = _headrace.HfTokenizer.from_json(path.read_bytes(), str(path))
    texts = _texts(style, 10_000, seed=11)
    # The inputs cover what they claim to: scripts, emoji, whitespace runs, invalid bytes.
    joined = b"".join(texts).decode("utf-8", "replace")
    for sample in ["的", "😀", "مرحبا", "\u3000", "  \n", "def f(x)", "e\u0301", "\ufffd"]:
        assert sample in joined, sample
    assert sum(1 for t in texts if b"\xff" in t or b"\x80" in t) > 500

    mismatches = []
    total_tokens = 0
    for add_special in (False, True):
        strings = [t.decode("utf-8", "replace") for t in texts]
        expected = [e.ids for e in ref.encode_batch(strings, add_special_tokens=add_special)]
        got = ours.encode_batch(texts, add_special)
        for text, e, g in zip(texts, expected, got):
            total_tokens += len(e)
            if e != g:
                mismatches.append((text, e, g))
    assert not mismatches, f"{len(mismatches)} of 20000 differ; first: {mismatches[:2]}"
    # The merges did work: far fewer tokens than bytes.
    assert total_tokens < 0.6 * 2 * sum(len(t) for t in texts)
    if style == "llama3":  # its post-processor adds <|begin_of_text|>
        bos = ref.token_to_id("<|begin_of_text|>")
        assert ours.encode(b"hi", True)[0] == bos and ours.encode(b"hi", False)[0] != bos


def test_both_merge_formats_are_covered(trained):
    qwen = json.loads((trained["qwen2"] / "tokenizer.json").read_text())
    llama = json.loads((trained["llama3"] / "tokenizer.json").read_text())
    assert isinstance(qwen["model"]["merges"][0], str)
    assert isinstance(llama["model"]["merges"][0], list)
    assert llama["model"]["ignore_merges"] is True
    assert qwen["normalizer"]["type"] == "NFC"


@pytest.mark.parametrize("model", ["WordPiece", "Unigram", "WordLevel"])
def test_unsupported_model_types_are_config_errors(tmp_path, model):
    from tokenizers import Tokenizer, models
    tok = Tokenizer({"WordPiece": lambda: models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"),
                     "Unigram": lambda: models.Unigram([("<unk>", 0.0), ("a", -1.0)], 0),
                     "WordLevel": lambda: models.WordLevel({"[UNK]": 0, "a": 1},
                                                           unk_token="[UNK]")}[model]())
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(headrace.ConfigError, match=f"'{model}' is not supported.*only BPE"):
        _headrace.HfTokenizer.from_json(path.read_bytes(), str(path))


# --- chat templates ---------------------------------------------------------------------

IMAGE = {"qwen2": ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"),
         "llama3": ("<|end_header_id|>", "", "")}  # the Llama style has no image token


def _conversations(n, seed):
    """Multi-turn conversations: a system turn in some, one to three images in some."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        turns = []
        if i % 3 == 0:
            turns.append(("system", "You are a careful assistant. " + mht.make_text(rng, 4)))
        for k in range(rng.randint(1, 3)):
            images = "".join("<image>\n" for _ in range(rng.randint(0, 3 if k == 0 else 1)))
            turns.append(("user", images + (mht.make_text(rng, 10) or "What is this?")))
            turns.append(("assistant", mht.make_text(rng, 12) or "A bus."))
        out.append(turns)
    return out


def _reference(folder):
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def _expand(text, style, n):
    token, start, end = IMAGE[style]
    return text.replace("<image>", start + token * n + end)


@pytest.mark.parametrize("style", STYLES)
def test_rendered_template_and_ids_equal_transformers(trained, style):
    folder = trained[style]
    ref = _reference(folder)
    token, start, end = IMAGE[style] if style == "qwen2" else ("", "", "")
    n_image = 6
    chat = _headrace.ChatTokenizer.create(
        (folder / "tokenizer.json").read_bytes(), (folder / "tokenizer_config.json").read_bytes(),
        max_length=4096, image_token=token, image_start=start, image_end=end,
        image_tokens=n_image)
    conversations = _conversations(300, seed=5)
    assert any(sum(t.count("<image>") for _, t in c) >= 3 for c in conversations)
    assert any(c[0][0] == "system" for c in conversations)
    for turns in conversations:
        messages = [{"role": r, "content": _expand(t, style, n_image) if token else t}
                    for r, t in turns]
        for gen in (False, True):
            expected = ref.apply_chat_template(messages, tokenize=False,
                                               add_generation_prompt=gen)
            got = chat.render([(m["role"], m["content"]) for m in messages], gen)
            assert got == expected, (turns, gen)
        rendered = ref.apply_chat_template(messages, tokenize=False)
        want_ids = ref(rendered, add_special_tokens=False)["input_ids"]
        ids, mask, labels = chat.tokenize(turns)
        n = int(np.sum(mask))
        assert ids[:n] == want_ids
        assert all(i == 0 or i == ref.pad_token_id for i in ids[n:]) or n == len(ids)
        if token:
            assert want_ids.count(ref.convert_tokens_to_ids(token)) == n_image * sum(
                t.count("<image>") for _, t in turns)
        # The loss covers exactly the tokens that overlap an assistant turn as the
        # template renders it: from the end of the generation prompt before it to the
        # end of the rendering through it (spans found here with transformers).
        spans = []
        for k, m in enumerate(messages):
            if m["role"] == "assistant":
                before = ref.apply_chat_template(messages[:k], tokenize=False,
                                                 add_generation_prompt=True) if k else ""
                through = ref.apply_chat_template(messages[:k + 1], tokenize=False)
                assert rendered.startswith(through) and through.startswith(before)
                spans.append((len(before), len(through)))
        offsets = ref(rendered, add_special_tokens=False,
                      return_offsets_mapping=True)["offset_mapping"]
        want_labels = [i if any(s < e2 and max(e, s + 1) > s2 for s2, e2 in spans) else IGNORE
                       for i, (s, e) in zip(want_ids, offsets)]
        assert labels[:n] == want_labels
        trained_text = ref.decode([label for label in labels[:n] if label != IGNORE])
        end_marker = "<|im_end|>" if style == "qwen2" else "<|eot_id|>"
        assert trained_text.count(end_marker) == len(spans)
        assert all(label == IGNORE or label == i for label, i in zip(labels, ids))


def test_a_failing_template_names_the_turn(trained):
    folder = trained["qwen2"]
    strict = ("{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
              "{{ raise_exception('System message must be first') }}{% endif %}"
              "{{ m['content'] }}{% endfor %}")
    chat = _headrace.ChatTokenizer.create((folder / "tokenizer.json").read_bytes(),
                                          chat_template=strict, max_length=32)
    chat.tokenize([("system", "s"), ("user", "u")])
    with pytest.raises(headrace.Error, match=r"turn 2 \(system\): System message must be first"):
        chat.tokenize([("user", "u"), ("assistant", "a"), ("system", "late")])


# --- through the engine -----------------------------------------------------------------

def _bpe_config(path, dataset, folder, **tokenize):
    params = {"tokenizer": str(folder / "tokenizer.json"), "max_length": 96,
              "image_token": "<|image_pad|>", "image_start": "<|vision_start|>",
              "image_end": "<|vision_end|>", **tokenize}
    path.write_text(f"""
source:
  manifest: {dataset / 'manifest.jsonl'}
seed: 3
epochs: 1
batch:
  size: 8
ops:
  - image.decode: {{}}
  - image.resize: {{shorter_side: 64}}
  - image.center_crop: {{size: 56}}
  - image.normalize: {{}}
  - text.tokenize: {json.dumps(params)}
execution:
  cpu_threads: 2
memory:
  budget_bytes: 64MiB
""")
    return path


def test_a_yaml_pipeline_with_a_tokenizer_json_gives_ids_mask_and_labels(
        trained, py_sample, tmp_path):
    folder = trained["qwen2"]
    ref = _reference(folder)
    config = _bpe_config(tmp_path / "bpe.yaml", py_sample, folder)
    pipeline = headrace.Pipeline.from_yaml(config)
    records = {json.loads(line)["id"]: json.loads(line)
               for line in (py_sample / "manifest.jsonl").read_text().splitlines()}
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    pad = ref.convert_tokens_to_ids("<|image_pad|>")
    rows = 0
    with headrace.Loader(pipeline) as loader:
        for batch in loader:
            ids = np.asarray(batch["input_ids"])
            mask = np.asarray(batch["attention_mask"])
            labels = np.asarray(batch["labels"])
            assert ids.shape == mask.shape == labels.shape == (len(batch["id"]), 96)
            for row, record_id in enumerate(batch["id"]):
                turns = records[record_id]["conversations"]
                # 56x56 after the crop: (56 / (14 * 2))^2 = 4 image tokens.
                messages = [{"role": roles[t["from"]],
                             "content": t["value"].replace(
                                 "<image>", "<|vision_start|>" + "<|image_pad|>" * 4 +
                                 "<|vision_end|>")} for t in turns]
                want = ref(ref.apply_chat_template(messages, tokenize=False),
                           add_special_tokens=False)["input_ids"][:96]
                n = int(mask[row].sum())
                assert n == len(want)
                assert ids[row, :n].tolist() == want
                assert int((ids[row] == pad).sum()) == 4
                trained_ids = labels[row][labels[row] != IGNORE].tolist()
                assert trained_ids and set(trained_ids) <= set(want)
                rows += 1
    assert rows == 48


def test_a_yaml_pipeline_reports_an_unsupported_tokenizer_as_a_config_error(
        trained, py_sample, tmp_path):
    from tokenizers import Tokenizer, models
    folder = tmp_path / "wp"
    folder.mkdir()
    Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]")).save(
        str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": mht.CHATML_TEMPLATE}))
    config = _bpe_config(tmp_path / "wp.yaml", py_sample, folder, image_token="")
    with pytest.raises(headrace.ConfigError, match="text.tokenize.tokenizer.*'WordPiece'"):
        with headrace.Loader(headrace.Pipeline.from_yaml(config)) as loader:
            next(iter(loader))


def test_the_headrace_binary_runs_the_yaml_and_counts_template_failures_per_sample(
        trained, py_sample, tmp_path, headrace_bin):
    from e2e_util import run_headrace
    folder = trained["qwen2"]
    config = _bpe_config(tmp_path / "bpe.yaml", py_sample, folder)
    report = tmp_path / "report.json"
    run_headrace(headrace_bin, "run", config, "--report", report, "--set", "trainer.step_ms=1")
    r = json.loads(report.read_text())
    assert r["samples"] == 48 and r["errors"]["total"] == 0
    # A template that rejects a second user turn fails those samples only, naming the turn.
    strict = ("{% for m in messages %}{% if m['role'] == 'user' and loop.index0 > 1 %}"
              "{{ raise_exception('one question per sample') }}{% endif %}"
              "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    config = _bpe_config(tmp_path / "strict.yaml", py_sample, folder, chat_template=strict)
    run_headrace(headrace_bin, "run", config, "--report", report, "--set", "trainer.step_ms=1",
                 "--set", "errors.max_error_rate=1", check=False)
    r = json.loads(report.read_text())
    multi = sum(1 for line in (py_sample / "manifest.jsonl").read_text().splitlines()
                if sum(t["from"] == "human" for t in json.loads(line)["conversations"]) > 1)
    assert 0 < multi < 48
    assert r["errors"]["total"] == multi and r["samples"] == 48 - multi
    assert "turn 2 (user): one question per sample" in json.dumps(r["errors"]["first"])
