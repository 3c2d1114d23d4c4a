#!/usr/bin/env python3
"""Real tokenizer vocabularies and chat templates for the tokenizer tests (issue 25).

llama.cpp keeps the vocabularies of the models it supports, with test vectors (the ids
the model's own Hugging Face tokenizer gives for each test string), in
vendor/llama.cpp/models/ of the `llama-cpp-python` source distribution on PyPI; its
models/templates/ holds the models' chat templates as their repositories ship them.
This script downloads that sdist with pip (no build), converts the vocabularies to
tokenizer.json with transformers' GGUF loader (the `gguf` package, requirements-dev.txt),
restores what a GGUF file does not carry but the real tokenizer.json has (below), checks
every converted file against llama.cpp's test vectors, and writes, under data/vocabs/
(git-ignored):

    qwen2/tokenizer.json    Qwen2/2.5/3 (151,643 tokens + the Qwen2.5/3 added tokens)
    llama3/tokenizer.json   Llama 3 (128,000 + 256)
    gpt2/tokenizer.json     GPT-2 (50,257)
    templates/*.jinja       the chat templates of models/templates/

Usage: python scripts/fetch_vocabs.py [--out data/vocabs]. Idempotent: what is there
is kept. Exit 1 when a converted tokenizer disagrees with a test vector.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tarfile

SDIST = "llama-cpp-python==0.3.36"
MODELS = "vendor/llama.cpp/models/"

# Added tokens of Qwen2.5 (151646-151664) and Qwen3 (151665-151668), as the models'
# tokenizer.json lists them; llama.cpp's qwen2 vocabulary has [PAD...] placeholders there.
QWEN_ADDED = [
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]


def patch_qwen2(j):
    """Qwen2's tokenizer.json normalizes with NFC and has the Qwen2.5/3 added tokens."""
    j["normalizer"] = {"type": "NFC"}
    by_id = {a["id"]: a for a in j["added_tokens"]}
    for k, (content, special) in enumerate(QWEN_ADDED):
        i = 151646 + k
        old = by_id.get(i)
        if old is not None:
            j["model"]["vocab"].pop(old["content"], None)
        entry = {"id": i, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": special}
        if old is not None:
            old.update(entry)
        else:
            j["added_tokens"].append(entry)
        # In the model's vocabulary too, at its id: tokenizers gives an added token that
        # the model lacks the next free id instead.
        j["model"]["vocab"][content] = i
    j["added_tokens"].sort(key=lambda a: a["id"])
    return j


def patch_llama3(j):
    """Llama 3's tokenizer.json has ignore_merges and a post-processor adding the BOS
    (llama.cpp's vector for 'Cửa Việt' needs ignore_merges)."""
    j["model"]["ignore_merges"] = True
    bos = "<|begin_of_text|>"
    j["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [128000], "tokens": [bos]}}},
        ],
    }
    return j


# name under data/vocabs -> (llama.cpp's vocabulary, patch)
VOCABS = {
    "qwen2": ("qwen2", patch_qwen2),
    "llama3": ("llama-bpe", patch_llama3),
    "gpt2": ("gpt-2", lambda j: j),
}


def fetch_sdist(cache):
    found = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
    if found:
        return found[-1]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                    ":all:", "--no-build-isolation", SDIST, "-d", str(cache)], check=True)
    return sorted(cache.glob("llama_cpp_python-*.tar.gz"))[-1]


def extract(sdist, raw):
    raw.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            at = m.name.find(MODELS)
            if at < 0 or not m.isfile():
                continue
            rel = m.name[at + len(MODELS):]
            wanted = rel.startswith("templates/") or any(
                rel.startswith(f"ggml-vocab-{v}.gguf") for v, _ in VOCABS.values())
            if not wanted:
                continue
            dest = raw / rel
            if dest.exists():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(tar.extractfile(m).read())


def convert(raw, vocab, patch, dest):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(raw), gguf_file=f"ggml-vocab-{vocab}.gguf")
    j = patch(json.loads(tok.backend_tokenizer.to_str()))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")


def check_vectors(raw, vocab, path):
    """llama.cpp's .inp/.out: test strings and the ids the model's tokenizer gives."""
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(str(path))
    inp = (raw / f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8")
    out = (raw / f"ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8")
    texts = inp.split("\n__ggml_vocab_test__\n")
    expected = out.split("\n")
    bad = 0
    for text, want in zip(texts, expected):
        got = t.encode(text, add_special_tokens=False).ids
        if got != [int(x) for x in want.split()]:
            bad += 1
            print(f"{path}: {text!r} -> {got}, llama.cpp expects {want}", file=sys.stderr)
    return len(texts), bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[1] /
                                         "data" / "vocabs"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    raw = out / "llama.cpp"
    extract(fetch_sdist(out / "sdist"), raw)
    templates = out / "templates"
    templates.mkdir(parents=True, exist_ok=True)
    for src in (raw / "templates").glob("*.jinja"):
        (templates / src.name).write_bytes(src.read_bytes())
    failed = False
    for name, (vocab, patch) in VOCABS.items():
        dest = out / name / "tokenizer.json"
        if not dest.exists():
            convert(raw, vocab, patch, dest)
        n, bad = check_vectors(raw, vocab, dest)
        print(f"{dest}: {n - bad}/{n} of llama.cpp's test vectors agree")
        failed |= bad > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
