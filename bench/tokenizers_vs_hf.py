"""text.tokenize's HF tokenizer.json path against the `tokenizers` package, and the VQA
pipeline with it against the SentencePiece one (issue 14). `make bench-tokenize`.

1. Encoding throughput, one thread: the same generated multilingual texts (CJK, emoji,
   Arabic, code, whitespace runs; tools/make_hf_tokenizer.py) through
   `tokenizers.Tokenizer.encode_batch` (RAYON_NUM_THREADS=1, set before the import) and
   through headrace's HfTokenizer.encode_batch (C++, the GIL released), each returning
   the ids to Python. Best of --repeat passes; the ids are checked equal first.
   With --real, the same on the real vocabularies (Qwen2's 151k, Llama 3's 128k, GPT-2;
   scripts/fetch_vocabs.py, issue 25), on the multilingual texts and on the hard strings
   of tests/python/hard_text.py; "cold" times one pass on a fresh tokenizer (no word
   cached), "warm" the best of --repeat.
2. The pipeline: `headrace bench engine` on examples/vqa.yaml (SentencePiece) and on
   examples/vqa_bpe.yaml (the Qwen2-style tokenizer.json, ChatML template, 64 image
   tokens per image), single-thread samples/s and text.tokenize's ms/sample.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import make_hf_tokenizer as mht  # noqa: E402


def best_of(repeat, fn):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def encode_throughput(style, folder, texts, repeat):
    import tokenizers
    from headrace import _headrace
    path = folder / "tokenizer.json"
    ref = tokenizers.Tokenizer.from_file(str(path))
    ours = _headrace.HfTokenizer.from_json(path.read_bytes(), str(path))
    expected = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    assert ours.encode_batch(texts, False) == expected, "ids differ from tokenizers"
    size = sum(len(t.encode()) for t in texts)
    tokens = sum(len(e) for e in expected)
    t_ref = best_of(repeat, lambda: ref.encode_batch(texts, add_special_tokens=False))
    t_ours = best_of(repeat, lambda: ours.encode_batch(texts, False))
    return {"style": style, "texts": len(texts), "bytes": size, "tokens": tokens,
            "tokenizers_mb_s": size / t_ref / 1e6, "headrace_mb_s": size / t_ours / 1e6,
            "tokenizers_tokens_s": tokens / t_ref, "headrace_tokens_s": tokens / t_ours,
            "speedup": t_ref / t_ours}


def real_throughput(name, path, corpora, repeat):
    import tokenizers
    from headrace import _headrace
    out = []
    for corpus, texts in corpora.items():
        data = [t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t for t in texts]
        strings = [t.decode("utf-8", "replace") for t in data]
        ref = tokenizers.Tokenizer.from_file(str(path))
        ours = _headrace.HfTokenizer.from_json(path.read_bytes(), str(path))
        start = time.perf_counter()
        expected = [e.ids for e in ref.encode_batch(strings, add_special_tokens=False)]
        cold_ref = time.perf_counter() - start
        start = time.perf_counter()
        got = ours.encode_batch(data, False)
        cold_ours = time.perf_counter() - start
        assert got == expected, f"{name}/{corpus}: ids differ from tokenizers"
        size = sum(len(t) for t in data)
        t_ref = best_of(repeat, lambda: ref.encode_batch(strings, add_special_tokens=False))
        t_ours = best_of(repeat, lambda: ours.encode_batch(data, False))
        r = {"tokenizer": name, "corpus": corpus, "texts": len(data), "bytes": size,
             "tokens": sum(len(e) for e in expected),
             "cold_tokenizers_mb_s": size / cold_ref / 1e6,
             "cold_headrace_mb_s": size / cold_ours / 1e6, "cold_speedup": cold_ref / cold_ours,
             "tokenizers_mb_s": size / t_ref / 1e6, "headrace_mb_s": size / t_ours / 1e6,
             "speedup": t_ref / t_ours}
        print(f"{name} / {corpus}: {len(data)} texts, {size / 1e6:.2f} MB; cold tokenizers "
              f"{r['cold_tokenizers_mb_s']:.2f} MB/s, headrace {r['cold_headrace_mb_s']:.2f} "
              f"MB/s: {r['cold_speedup']:.2f}x; warm {r['tokenizers_mb_s']:.2f} vs "
              f"{r['headrace_mb_s']:.2f} MB/s: {r['speedup']:.2f}x", flush=True)
        out.append(r)
    return out


def engine(binary, config, report):
    subprocess.run([str(binary), "bench", "engine", str(config), "--report", str(report)],
                   check=True, capture_output=True, text=True)
    data = json.loads(Path(report).read_text())
    ops = {o["name"]: o["ms_per_sample"] for o in data["ops"]}
    t1 = next(o for o in data["overhead"] if o["threads"] == 1)
    return {"config": str(config), "tokenize_ms_per_sample": ops["text.tokenize"],
            "ops_ms_per_sample": data["total_ms_per_sample"],
            "t1_samples_per_s": t1["samples_per_s"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=Path, default=REPO / "build" / "headrace")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "sample")
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-pipeline", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--real", action="store_true",
                        help="the real vocabularies only (data/vocabs, fetched when missing)")
    args = parser.parse_args()
    if args.real:
        vocabs = REPO / "data" / "vocabs"
        if not (vocabs / "qwen2" / "tokenizer.json").exists():
            subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_vocabs.py")],
                           check=True)
        sys.path.insert(0, str(REPO / "tests" / "python"))
        from hard_text import hard_strings
        corpora = {"multilingual": mht.make_corpus(args.texts, seed=2),
                   "hard": hard_strings(args.texts, seed=26)}
        results = {"machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "real": []}
        for name in ["qwen2", "llama3", "gpt2"]:
            results["real"] += real_throughput(name, vocabs / name / "tokenizer.json", corpora,
                                               args.repeat)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return

    results = {"machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "encode": []}
    corpus = mht.make_corpus(20000, seed=1)
    texts = mht.make_corpus(args.texts, seed=2)
    work = REPO / "out" / "bench-tokenize"
    for style in ["qwen2", "llama3"]:
        folder = work / style
        mht.write(style, folder, corpus, args.vocab_size)
        r = encode_throughput(style, folder, texts, args.repeat)
        results["encode"].append(r)
        print(f"{style}: {r['texts']} texts, {r['bytes'] / 1e6:.2f} MB, {r['tokens']} tokens; "
              f"tokenizers {r['tokenizers_mb_s']:.2f} MB/s, headrace {r['headrace_mb_s']:.2f} "
              f"MB/s: {r['speedup']:.2f}x", flush=True)

    if not args.skip_pipeline:
        hf = args.data / "hf"
        if not (hf / "tokenizer.json").exists():
            mht.write("qwen2", hf, corpus, args.vocab_size)
        sp = engine(args.bin, REPO / "examples" / "vqa.yaml", work / "engine_sp.json")
        bpe = engine(args.bin, REPO / "examples" / "vqa_bpe.yaml", work / "engine_bpe.json")
        results["pipeline"] = {"sentencepiece": sp, "bpe": bpe,
                               "bpe_over_sp": bpe["t1_samples_per_s"] / sp["t1_samples_per_s"]}
        for name, r in (("sentencepiece", sp), ("hf bpe", bpe)):
            print(f"vqa pipeline, {name}: text.tokenize {r['tokenize_ms_per_sample']:.4f} "
                  f"ms/sample, ops {r['ops_ms_per_sample']:.3f} ms/sample, T=1 "
                  f"{r['t1_samples_per_s']:.1f} samples/s")
        print(f"bpe / sentencepiece samples/s: {results['pipeline']['bpe_over_sp']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
