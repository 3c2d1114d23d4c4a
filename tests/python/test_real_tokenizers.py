"""text.tokenize with the real tokenizers and chat templates of Qwen2/2.5/3, Llama 3 and
GPT-2 (issue 25), against the references: `tokenizers` for ids, transformers'
apply_chat_template for renderings and assistant masks.

The vocabularies come from llama.cpp's copies in the llama-cpp-python sdist on PyPI,
converted by scripts/fetch_vocabs.py into data/vocabs/ (run here when missing; cached).
The sweep's size per tokenizer is HEADRACE_TOKENIZER_SWEEP (default 4,000 strings here;
`make test-tokenizers` runs 25,000).
"""
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import headrace
from headrace import _headrace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import VOCAB_NAMES, fetch_vocabs  # noqa: E402
from hard_text import hard_strings  # noqa: E402

import tokenizers  # noqa: E402
import transformers  # noqa: E402

SWEEP = int(os.environ.get("HEADRACE_TOKENIZER_SWEEP", "4000"))
IGNORE = -100
NAMES = VOCAB_NAMES


@pytest.fixture(scope="module")
def vocabs():
    return fetch_vocabs()


def _pair(vocabs, name):
    path = vocabs / name / "tokenizer.json"
    return (tokenizers.Tokenizer.from_file(str(path)),
            _headrace.HfTokenizer.from_json(path.read_bytes(), str(path)))


def _specials(ref):
    return [t.content for t in ref.get_added_tokens_decoder().values()][:40]


# --- ids --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_ids_equal_tokenizers_on_hard_strings(vocabs, name):
    ref, ours = _pair(vocabs, name)
    texts = hard_strings(SWEEP, seed=25, specials=_specials(ref))
    joined = b"".join(texts).decode("utf-8", "replace")
    # The corpus has what it claims: new code points, U+180E, marks, bad bytes, specials.
    for probe in ["\u180e", "\u0301", "\ufffd", "\u3000", "<|"]:
        assert probe in joined, probe
    assert sum(1 for ch in joined if 0x11F00 <= ord(ch) <= 0x11F5F or
               0x31350 <= ord(ch) <= 0x323AF or 0x16100 <= ord(ch) <= 0x1613F) > 50
    mismatches = []
    for add_special in (False, True):
        strings = [t.decode("utf-8", "replace") for t in texts]
        expected = [e.ids for e in ref.encode_batch(strings, add_special_tokens=add_special)]
        got = ours.encode_batch(texts, add_special)
        mismatches += [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not mismatches, (f"{len(mismatches)} of {2 * len(texts)} differ; first: "
                            f"{mismatches[:2]}")


@pytest.mark.parametrize("name,vocab", [("qwen2", "qwen2"), ("llama3", "llama-bpe"),
                                        ("gpt2", "gpt-2")])
def test_ids_equal_llama_cpp_test_vectors(vocabs, name, vocab):
    _, ours = _pair(vocabs, name)
    raw = vocabs / "llama.cpp"
    texts = (raw / f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8").split(
        "\n__ggml_vocab_test__\n")
    expected = (raw / f"ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8").split("\n")
    assert len(texts) > 40
    for text, want in zip(texts, expected):
        assert ours.encode(text.encode(), False) == [int(x) for x in want.split()], text


def test_qwen2_nfc_leaves_marks_the_reference_does_not_know_in_their_order(vocabs):
    ref, ours = _pair(vocabs, "qwen2")
    # U+1AC1 (Unicode 14, class 230) after U+0316 (220) and U+0301 (230): Unicode orders
    # 0316 0301 1AC1 or leaves them; the reference's tables give U+1AC1 class 0.
    for text in ["a\u1ac1\u0316", "a\u0301\u1ac1\u0316", "e\u0308\u1df6\u0323",
                 "\u0915\u094d\u0c3c\u093c"]:
        assert ours.encode(text.encode(), False) == ref.encode(text).ids, ascii(text)


def test_a_long_run_of_out_of_order_marks_takes_linear_time(vocabs):
    ref, ours = _pair(vocabs, "qwen2")
    text = "a" + "\u0301\u0316" * 80_000  # 320 KB, every pair out of order
    t0 = time.perf_counter()
    got = ours.encode(text.encode(), False)
    ours_s = time.perf_counter() - t0
    assert got == ref.encode(text).ids
    assert ours_s < 3.0, f"{ours_s:.1f} s for 320 KB (was 38 s; the reference takes 0.14 s)"


# --- chat templates ---------------------------------------------------------------------

# Templates: llama.cpp's copies of the models' own (models/templates/ in the sdist), and,
# where it has none, the models' chat_template as their repositories ship it, kept in
# tests/python/data/chat_templates/ with the source named in its README.
TEMPLATE_DATA = Path(__file__).resolve().parent / "data" / "chat_templates"


def _template(vocabs, name):
    for folder in (vocabs / "templates", TEMPLATE_DATA):
        if (folder / name).exists():
            return (folder / name).read_text(encoding="utf-8")
    raise FileNotFoundError(name)


TEMPLATES = [  # (template file, tokenizer, bos, eos)
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2", None, "<|im_end|>"),
    ("Qwen-Qwen3-0.6B.jinja", "qwen2", None, "<|im_end|>"),
    ("Qwen-QwQ-32B.jinja", "qwen2", None, "<|im_end|>"),
    ("Qwen2-VL-7B-Instruct.jinja", "qwen2", None, "<|im_end|>"),
    ("Qwen2.5-VL-7B-Instruct.jinja", "qwen2", None, "<|im_end|>"),
    ("chatml.jinja", "qwen2", None, "<|im_end|>"),
    ("meta-llama-Meta-Llama-3-8B-Instruct.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
]
DATE = "2026-03-09"


def _reference(vocabs, tokenizer, template, bos, eos):
    ref = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(vocabs / tokenizer / "tokenizer.json"), bos_token=bos,
        eos_token=eos)
    ref.chat_template = template
    return ref


def _conversations():
    rng = __import__("random").Random(7)
    texts = hard_strings(400, seed=3)
    pool = [t.decode("utf-8", "replace") for t in texts] + [
        "Blue.", "", "  spaced  ", "\n\nleading newlines", "<think>\nsteps\n</think>\n\nDone.",
        "\u0301\u0316marks first", "Line\r\nbreaks\n", "日本語で答えて", "x" * 300]
    out = []
    for i in range(120):
        turns = []
        if i % 3 == 0:
            turns.append(("system", rng.choice(pool) or "Be brief."))
        for _ in range(rng.randint(1, 3)):
            turns.append(("user", rng.choice(pool) or "Hi"))
            turns.append(("assistant", rng.choice(pool)))
        out.append(turns)
    return out


@pytest.fixture(scope="module")
def conversations():
    return _conversations()


def _strftime_date(monkeypatch):
    """transformers' strftime_now (datetime.now().strftime), at DATE."""
    import datetime

    from transformers.utils import chat_template_utils

    class Fixed(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 3, 9, 12, 0, 0)
    monkeypatch.setattr(chat_template_utils, "datetime", Fixed)
    # transformers caches compiled templates, strftime_now bound in: a fresh one here.
    if hasattr(chat_template_utils, "_compile_jinja_template"):
        chat_template_utils._compile_jinja_template.cache_clear()


@pytest.mark.parametrize("template,tokenizer,bos,eos", TEMPLATES,
                         ids=[t[0].removesuffix(".jinja") for t in TEMPLATES])
def test_real_templates_render_and_tokenize_as_transformers(
        vocabs, conversations, monkeypatch, template, tokenizer, bos, eos):
    _strftime_date(monkeypatch)
    source = _template(vocabs, template)
    ref = _reference(vocabs, tokenizer, source, bos, eos)
    config = json.dumps({"bos_token": bos, "eos_token": eos}).encode()
    chat = _headrace.ChatTokenizer.create(
        (vocabs / tokenizer / "tokenizer.json").read_bytes(), config, chat_template=source,
        max_length=8192, template_date=DATE)
    for turns in conversations:
        messages = [{"role": r, "content": t} for r, t in turns]
        for gen in (False, True):
            want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
            assert chat.render(turns, gen) == want, (template, turns, gen)
        rendered = ref.apply_chat_template(messages, tokenize=False)
        want_ids = ref(rendered, add_special_tokens=False)["input_ids"][:8192]
        ids, mask, labels = chat.tokenize(turns)
        n = int(np.sum(mask))
        assert ids[:n] == want_ids, (template, turns)
        assert all(label == IGNORE or label == i for label, i in zip(labels, ids))
        assistant = sum(1 for r, _ in turns if r == "assistant")
        trained = ref.decode([label for label in labels[:n] if label != IGNORE])
        assert trained.count(eos) == assistant, (template, turns)  # every turn's end marker
        if "Qwen3" in template or "QwQ" in template:
            continue  # they render earlier turns differently once later ones follow
        # Where each turn's rendering is a prefix of the next, the span runs from the end
        # of the generation prompt before the turn to the end of the rendering through it.
        spans = []
        for k, m in enumerate(messages):
            if m["role"] == "assistant":
                before = ref.apply_chat_template(messages[:k], tokenize=False,
                                                 add_generation_prompt=True)
                through = ref.apply_chat_template(messages[:k + 1], tokenize=False)
                assert rendered.startswith(through) and through.startswith(before)
                spans.append((len(before), len(through)))
        offsets = ref(rendered, add_special_tokens=False,
                      return_offsets_mapping=True)["offset_mapping"][:n]
        want_labels = [i if any(s0 < e1 and max(e0, s0 + 1) > s1 for s1, e1 in spans)
                       else IGNORE for i, (s0, e0) in zip(want_ids, offsets)]
        assert labels[:n] == want_labels, (template, turns)
    if "strftime_now" in source:
        assert "09 Mar 2026" in chat.render([("user", "hi")], True)


def _qwen3(vocabs):
    source = _template(vocabs, "Qwen-Qwen3-0.6B.jinja")
    chat = _headrace.ChatTokenizer.create(
        (vocabs / "qwen2" / "tokenizer.json").read_bytes(),
        json.dumps({"eos_token": "<|im_end|>"}).encode(), chat_template=source,
        max_length=4096)
    return chat, _reference(vocabs, "qwen2", source, None, "<|im_end|>")


def _trained_text(ref, ids, labels):
    return ref.decode([label for label in labels if label != IGNORE])


def test_qwen3_trains_every_assistant_turn_end_and_not_the_empty_think_block(vocabs):
    chat, ref = _qwen3(vocabs)
    turns = [("user", "Q1"), ("assistant", "A one."), ("user", "Q2"),
             ("assistant", "A two."), ("user", "Q3"), ("assistant", "A three.")]
    rendered = chat.render(turns, False)
    assert "<think>\n\n</think>\n\nA three." in rendered  # the template inserts it
    ids, mask, labels = chat.tokenize(turns)
    trained = _trained_text(ref, ids, labels)
    assert trained == "A one.<|im_end|>\nA two.<|im_end|>\nA three.<|im_end|>\n"


def test_an_assistant_turn_starting_with_reordered_marks_keeps_its_labels(vocabs):
    chat, ref = _qwen3(vocabs)
    turns = [("user", "Q"), ("assistant", "\u0301\u0316 answer")]
    ids, mask, labels = chat.tokenize(turns)
    n = int(np.sum(mask))
    rendered = chat.render(turns, False)
    want = ref(rendered, add_special_tokens=False, return_offsets_mapping=True)
    assert ids[:n] == want["input_ids"]
    # Every token from the first mark (NFC puts U+0316 first) to the end marker is
    # trained, none before.
    start = rendered.index("\u0301")
    first = min(i for i, (s, e) in enumerate(want["offset_mapping"]) if e > start)
    assert all(labels[i] == ids[i] for i in range(first, n - 1)), labels[:n]
    assert all(labels[i] == IGNORE for i in range(first))


GENERATION_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_generation_blocks_give_transformers_assistant_masks(vocabs, conversations):
    ref = _reference(vocabs, "qwen2", GENERATION_TEMPLATE, None, "<|im_end|>")
    chat = _headrace.ChatTokenizer.create(
        (vocabs / "qwen2" / "tokenizer.json").read_bytes(),
        json.dumps({"eos_token": "<|im_end|>"}).encode(), chat_template=GENERATION_TEMPLATE,
        max_length=8192)
    for turns in conversations[:60]:
        messages = [{"role": r, "content": t} for r, t in turns]
        out = ref.apply_chat_template(messages, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        ids, mask, labels = chat.tokenize(turns)
        n = int(np.sum(mask))
        assert ids[:n] == out["input_ids"]
        want = [i if m else IGNORE for i, m in zip(out["input_ids"], out["assistant_masks"])]
        assert labels[:n] == want, turns


# --- configuration ----------------------------------------------------------------------

LLAMA3_CONFIG = {  # as Meta ships it: model_max_length does not fit in 64 bits
    "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
    "model_max_length": 1000000000000000019884624838656, "clean_up_tokenization_spaces": True,
    "tokenizer_class": "PreTrainedTokenizerFast"}


def test_meta_llama3_config_with_a_huge_integer_parses(vocabs):
    source = _template(vocabs, "meta-llama-Llama-3.1-8B-Instruct.jinja")
    config = dict(LLAMA3_CONFIG, chat_template=source)
    chat = _headrace.ChatTokenizer.create(
        (vocabs / "llama3" / "tokenizer.json").read_bytes(), json.dumps(config).encode(),
        max_length=64)
    ids, _, _ = chat.tokenize([("user", "hi"), ("assistant", "yo")])
    assert ids[0] == 128000  # <|begin_of_text|>


def test_without_a_config_the_bos_comes_from_the_post_processor(vocabs):
    source = _template(vocabs, "meta-llama-Llama-3.1-8B-Instruct.jinja")
    chat = _headrace.ChatTokenizer.create(
        (vocabs / "llama3" / "tokenizer.json").read_bytes(), chat_template=source,
        max_length=64)
    ids, _, _ = chat.tokenize([("user", "hi"), ("assistant", "yo")])
    assert ids[0] == 128000
    # GPT-2's post-processor adds nothing: a template writing bos_token is refused.
    with pytest.raises(headrace.ConfigError, match="writes bos_token"):
        _headrace.ChatTokenizer.create(
            (vocabs / "gpt2" / "tokenizer.json").read_bytes(), chat_template=source,
            max_length=64)


def test_a_template_calling_strftime_now_needs_a_date(vocabs):
    source = _template(vocabs, "meta-llama-Llama-3.2-3B-Instruct.jinja")
    config = json.dumps(LLAMA3_CONFIG).encode()
    tok = (vocabs / "llama3" / "tokenizer.json").read_bytes()
    with pytest.raises(headrace.ConfigError, match="template_date"):
        _headrace.ChatTokenizer.create(tok, config, chat_template=source, max_length=64)
    a = _headrace.ChatTokenizer.create(tok, config, chat_template=source, max_length=64,
                                       template_date="2025-01-31")
    assert "31 Jan 2025" in a.render([("user", "hi")], True)


def test_an_inline_template_still_reads_the_config_beside_the_tokenizer(
        vocabs, py_sample, tmp_path):
    folder = tmp_path / "llama3"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((vocabs / "llama3" / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps(LLAMA3_CONFIG))
    source = _template(vocabs, "meta-llama-Llama-3.1-8B-Instruct.jinja")
    params = {"tokenizer": str(folder / "tokenizer.json"), "chat_template": source,
              "max_length": 64}
    config = tmp_path / "p.yaml"
    config.write_text(f"""
source:
  manifest: {py_sample / 'manifest.jsonl'}
seed: 3
epochs: 1
batch:
  size: 4
ops:
  - text.tokenize: {json.dumps(params)}
execution:
  cpu_threads: 1
""")
    with headrace.Loader(headrace.Pipeline.from_yaml(config)) as loader:
        batch = next(iter(loader))
    ids = np.asarray(batch["input_ids"])
    assert (ids[:, 0] == 128000).all()
