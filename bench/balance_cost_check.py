"""The step-cost model (batch.balance, exec/step_cost.h) against a real model's time (issue
49): a randomly initialised Qwen2-VL from `transformers` (a config, no download: 4 text
layers of 256, a 4-block vision tower of 128), forward + backward on this machine's CPU
for each sample of a generated mix (20-1,500 text tokens, 0-3 images of 8x8 to 48x48
patches), against the cost headrace counts for it: `flops` with this model's dimensions
(headrace._headrace._step_cost, the C++ rule), and `tokens`. Spearman rank correlation of
cost against the median time of --repeats runs.

    .venv/bin/python bench/balance_cost_check.py [--samples 48] [--repeats 3] [--seed 0]
"""
import argparse
import statistics
import time

import numpy as np
import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

from headrace import _headrace

IMAGE = 151655  # <|image_pad|>
START, END = 151652, 151653  # <|vision_start|>, <|vision_end|>


def model():
    torch.manual_seed(0)
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=256, intermediate_size=1024,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         rope_scaling={"type": "mrope", "mrope_section": [16, 8, 8]}),
        vision_config=dict(depth=4, embed_dim=128, num_heads=4, hidden_size=256, mlp_ratio=4))
    return Qwen2VLForConditionalGeneration(config).train(), config


def dims(net, config):
    """The model's dimensions as batch.balance counts them (the parameters a token is
    multiplied by: the decoder layers' and the output head's)."""
    def params(module):
        return float(sum(p.numel() for p in module.parameters()))
    text, vision = config.text_config, config.vision_config
    return {"llm_params": params(net.model.language_model.layers) + params(net.lm_head),
            "llm_layers": text.num_hidden_layers,
            "llm_hidden": text.num_attention_heads * (text.hidden_size // text.num_attention_heads),
            "vision_params": params(net.model.visual.blocks),
            "vision_layers": vision.depth, "vision_hidden": vision.embed_dim}


def sample(rng):
    """(input_ids, pixel_values, image_grid_thw, tokens, patches) of a generated sample."""
    grids = [(1, 2 * int(rng.integers(4, 25)), 2 * int(rng.integers(4, 25)))
             for _ in range(int(rng.choice([0, 1, 1, 2, 3])))]
    text = int(rng.integers(20, 1500))
    ids = list(rng.integers(1000, 100000, text))
    for t, h, w in grids:
        ids += [START] + [IMAGE] * (t * h * w // 4) + [END]
    patches = [t * h * w for t, h, w in grids]
    pixels = torch.randn(sum(patches), 3 * 2 * 14 * 14) if grids else None
    thw = torch.tensor(grids) if grids else None
    return torch.tensor([ids]), pixels, thw, len(ids), patches


def step_seconds(net, ids, pixels, thw, repeats):
    kw = {"input_ids": ids, "labels": ids}
    if pixels is not None:
        kw.update(pixel_values=pixels, image_grid_thw=thw,
                  mm_token_type_ids=(ids == IMAGE).int())  # 1: an image's token
    times = []
    for _ in range(repeats + 1):  # the first warms up
        start = time.perf_counter()
        net(**kw).loss.backward()
        times.append(time.perf_counter() - start)
        net.zero_grad(set_to_none=True)
    return statistics.median(times[1:])


def spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    net, config = model()
    d = dims(net, config)
    rng = np.random.default_rng(args.seed)
    seconds, flops, tokens = [], [], []
    for _ in range(args.samples):
        ids, pixels, thw, n, patches = sample(rng)
        seconds.append(step_seconds(net, ids, pixels, thw, args.repeats))
        flops.append(_headrace._step_cost("flops", n, patches, d))
        tokens.append(_headrace._step_cost("tokens", n, patches))
    print(f"{args.samples} samples, forward + backward median of {args.repeats}: "
          f"{min(seconds) * 1e3:.0f}-{max(seconds) * 1e3:.0f} ms; dims {d}")
    print(f"Spearman rank correlation with the time: flops {spearman(flops, seconds):.3f}, "
          f"tokens {spearman(tokens, seconds):.3f}")
    slope = np.polyfit(flops, seconds, 1)[0]
    print(f"time per headrace FLOP: {slope * 1e12:.2f} s per TFLOP "
          f"({1 / slope / 1e9:.1f} GFLOP/s achieved)")


if __name__ == "__main__":
    main()
