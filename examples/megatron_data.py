"""Headrace's data iterators in Megatron's rank grid (python/headrace/megatron.py), on the
CPU: N processes (torch.distributed, gloo) with Megatron-Core's parallel_state laid out as
tensor x pipeline x data parallel, each taking its micro-batches from the provider.

    python examples/megatron_data.py --data data/sample --world-size 4 --layouts 2x1 1x4
    python examples/megatron_data.py ... --layouts 2x1:first_last:first --json out/ranks.json

A layout is TPxPP[xCP][:pipeline_stages[:tensor_parallel]] (defaults: CP 1, first_last,
all). In
Megatron-LM the same provider goes to pretrain() with --dataloader-type external:

    provider = headrace.megatron.datasets_provider(
        train=pipeline, train_state=headrace.megatron.saved_state(args.dataloader_save,
                                                                  args.iteration))
    pretrain(provider, model_provider, ModelType.encoder_or_decoder, forward_step,
             args_defaults={"dataloader_type": "external"})

tests/python/test_trainers_megatron.py runs this file.
"""
import argparse
import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any, Dict, List

import torch.distributed as dist
import torch.multiprocessing as mp

import headrace
import headrace.megatron


def pipeline(data: Path) -> headrace.Pipeline:
    ops = headrace.ops
    return headrace.Pipeline(
        source=data / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=32), ops.center_crop(28), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=16)],
        batch_size=4, seed=3, cpu_threads=1, memory_budget="32MiB")


def run_layout(data: Path, layout: str, resume_after: int) -> Dict[str, Any]:
    """This rank under one layout: what Megatron's parallel_state says, and the sample
    indices of the batches of one epoch it reads (None where it does not read); with
    ``resume_after``, also the batches a provider restored from the state saved after that
    many of them gives next."""
    from megatron.core import parallel_state as ps
    grid, *choices = layout.split(":")
    tp_size, pp_size, cp_size = ([int(x) for x in grid.split("x")] + [1])[:3]
    stages = choices[0] if choices else "first_last"
    tensor_parallel = choices[1] if len(choices) > 1 else "all"
    ps.initialize_model_parallel(tensor_model_parallel_size=tp_size,
                                 pipeline_model_parallel_size=pp_size,
                                 context_parallel_size=cp_size)
    try:
        where = headrace.megatron.layout()
        provider = headrace.megatron.datasets_provider(
            train=pipeline(data), pipeline_stages=stages, tensor_parallel=tensor_parallel,
            device=None)
        train, _, _ = provider(None)
        record: Dict[str, Any] = dict(where, rank=dist.get_rank(), layout=layout,
                                      batches=None, resumed=None)
        if train is not None:
            batches: List[List[int]] = []
            state = None
            for step in range(len(train)):
                batches.append(next(train)["index"].tolist())
                if step + 1 == resume_after:
                    state = train.save_state()
            record["batches"] = batches
            train.close()
            if state is not None:
                restored, _, _ = headrace.megatron.datasets_provider(
                    train=pipeline(data), pipeline_stages=stages,
                    tensor_parallel=tensor_parallel, device=None, train_state=state)(None)
                record["resumed"] = [next(restored)["index"].tolist()
                                     for _ in range(len(restored) - resume_after)]
                restored.close()
        return record
    finally:
        ps.destroy_model_parallel()


def rank_main(rank: int, world_size: int, port: int, data: Path, layouts: List[str],
              resume_after: int, out: str) -> None:
    warnings.simplefilter("ignore")  # megatron-core warns that Transformer Engine is absent
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        mine = [run_layout(data, layout, resume_after) for layout in layouts]
        everyone: List[Any] = [None] * world_size
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            records = sorted((r for per_rank in everyone for r in per_rank),
                             key=lambda r: (layouts.index(r["layout"]), r["rank"]))
            text = json.dumps(records)
            if out:
                Path(out).write_text(text)
            else:
                for r in records:
                    print(json.dumps({k: r[k] for k in ("layout", "rank", "dp_rank", "tp_rank",
                                                        "cp_rank", "pp_rank")}),
                          "reads" if r["batches"] is not None else "no data",
                          r["batches"][:1] if r["batches"] else "")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/sample"))
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--layouts", nargs="+", default=["2x1"],
                        help="TPxPP[xCP][:pipeline_stages[:tensor_parallel]], run in turn")
    parser.add_argument("--resume-after", type=int, default=0,
                        help="save the state after this many batches and resume from it")
    parser.add_argument("--json", default="", help="write every rank's record here")
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    import megatron.core.parallel_state  # noqa: F401  (once, before the ranks fork)
    # fork: the ranks inherit the imported modules (megatron-core takes seconds to import);
    # nothing in this process has started a thread yet (no loader before the fork).
    mp.start_processes(rank_main, nprocs=options.world_size, start_method="fork",
                       args=(options.world_size, free_port(), options.data, options.layouts,
                             options.resume_after, options.json))


if __name__ == "__main__":
    main()
