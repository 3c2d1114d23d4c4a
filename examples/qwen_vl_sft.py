"""Qwen-VL supervised fine-tuning on a Headrace pipeline: the README's five-minute path.

    build/headrace make-sample --out data/vlm --mix vlm     # or your LLaVA-style data
    .venv/bin/python scripts/fetch_vocabs.py               # Qwen2's tokenizer.json (once)
    .venv/bin/python examples/qwen_vl_sft.py --data data/vlm/manifest.jsonl --max-steps 10

The pipeline is examples/qwen2_vl.yaml (images resized and cut into patches as
Qwen2VLProcessor does, the conversation tokenized with the chat template, M-RoPE
positions), packed into rows of --seq-len tokens; the trainer is
``headrace.hf.HeadraceTrainer``, which hands the model each packed batch so that every
sample's forward is its forward alone (headrace.models.ModelInputs; checked against the
model at the first batch). ``--model DIR`` trains a checkpoint you have on disk
(``AutoModelForImageTextToText.from_pretrained``; the pipeline's tokenizer and preset must
be that model's: the first batch says so if not); without it, a small randomly initialised
Qwen2-VL, to try the path on a CPU without a download (rows of 1024 tokens and images of
at most 64 tokens, unless set). Under torchrun each process reads
its own data-parallel rank's batches. tests/python/test_qwen_vl_sft_example.py runs it.
"""
import argparse
import math
from pathlib import Path

import torch
import transformers

import headrace
import headrace.hf

REPO = Path(__file__).resolve().parents[1]


def tiny_qwen2_vl() -> transformers.PreTrainedModel:
    """A Qwen2-VL with the real vocabulary and vision geometry (14 px patches, merge 2),
    two small text layers and one vision layer: random weights, seconds a step on a CPU."""
    torch.manual_seed(0)
    config = transformers.Qwen2VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         rope_scaling={"type": "mrope", "mrope_section": [4, 2, 2]}),
        vision_config=dict(depth=1, embed_dim=64, num_heads=2, hidden_size=64, mlp_ratio=1))
    return transformers.Qwen2VLForConditionalGeneration(config)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "examples/qwen2_vl.yaml"))
    parser.add_argument("--data", help="the manifest (JSONL or a JSON array); default: the "
                                       "config's source")
    parser.add_argument("--model", help="a local checkpoint folder; default: a tiny random "
                                        "Qwen2-VL")
    parser.add_argument("--seq-len", type=int, help="tokens per packed row (default 4096; "
                                                     "1024 for the tiny model)")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--out", default=str(REPO / "out/qwen_vl_sft"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any pipeline key, as `headrace run --set`")
    args = parser.parse_args(argv)

    overrides = {"batch.pack.seq_len": args.seq_len or (4096 if args.model else 1024),
                 "epochs": None}
    if args.data:
        overrides["source.manifest"] = args.data
    if not args.model:
        # The tiny model's logits are [rows, seq_len, 151936] like a real one's: on a CPU,
        # short rows, and images of at most 64 tokens so that a conversation fits one.
        names = headrace.Pipeline.from_yaml(args.config).spec().op_names
        if "image.smart_resize" in names:
            at = names.index("image.smart_resize")
            overrides[f"ops[{at}].image.smart_resize.max_pixels"] = 50176
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = value
    pipeline = headrace.Pipeline.from_yaml(args.config, overrides=overrides)

    model = (transformers.AutoModelForImageTextToText.from_pretrained(args.model)
             if args.model else tiny_qwen2_vl())
    training = transformers.TrainingArguments(
        output_dir=args.out, max_steps=args.max_steps, learning_rate=1e-4, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(), disable_tqdm=True)
    trainer = headrace.hf.HeadraceTrainer(model=model, args=training, train_loader=pipeline)
    result = trainer.train()
    waited = trainer.headrace_loader.stats()["wait_time_ratio"]
    report = trainer.headrace_loader.loader.report()
    trainer.headrace_loader.close()
    # Every sample lost, by kind: failed ones, and those packing left out or cut.
    errors = report["errors"]
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(errors["by_kind"].items()))
    print(f"trained {result.global_step} steps, mean loss {result.training_loss:.3f}; the "
          f"trainer waited {waited:.1%} of its time for data; {errors['total']} samples lost"
          + (f" ({kinds})" if kinds else ""))
    if not math.isfinite(result.training_loss):
        raise SystemExit("the loss is not finite")
    return result.training_loss


if __name__ == "__main__":
    main()
