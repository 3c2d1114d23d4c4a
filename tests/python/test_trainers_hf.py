"""headrace.hf: a tiny model trained by a real transformers.Trainer (examples/hf_trainer.py),
resumed from the Trainer's own checkpoints with exactly the batches of the uninterrupted run."""
import functools
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

import headrace

REPO = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=None)
def example():
    """examples/hf_trainer.py, loaded when a test first runs (it imports transformers:
    seconds that collecting the suite in every pytest-xdist worker need not spend)."""
    spec = importlib.util.spec_from_file_location("hf_trainer", REPO / "examples" / "hf_trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def full_run(py_sample, tmp_path_factory):
    """3 epochs of 6 batches, 2 batches per optimizer step (3 steps an epoch, the last of
    each epoch with 2 of them), a checkpoint every 2 steps."""
    out = tmp_path_factory.mktemp("hf_full")
    model = example().train(py_sample, out)
    return out, model.seen


def test_trainer_takes_each_epoch_of_the_loader_once_in_its_own_order(full_run):
    _, seen = full_run
    assert len(seen) == 18
    epochs = [sorted(i for batch in seen[e * 6:(e + 1) * 6] for i in batch) for e in range(3)]
    assert all(epoch == list(range(48)) for epoch in epochs)  # every sample once an epoch
    assert len({tuple(map(tuple, seen[e * 6:(e + 1) * 6])) for e in range(3)}) == 3


# After 4 batches (mid-epoch 0), 8 (mid-epoch 1) and 12 (the end of epoch 1).
@pytest.mark.parametrize("step,position", [(2, (0, 4)), (4, (1, 2)), (6, (1, 6))])
def test_resume_from_a_trainer_checkpoint_continues_with_the_next_batch(full_run, py_sample,
                                                                         tmp_path, step,
                                                                         position):
    out, seen = full_run
    checkpoint = out / f"checkpoint-{step}"
    state = json.loads((checkpoint / "headrace_loader_rank0.json").read_text())
    assert (state["epoch"], state["batch_in_epoch"]) == position
    resumed = example().train(py_sample, tmp_path / "resumed", resume=str(checkpoint))
    # Neither the Trainer nor accelerate re-read or re-sharded anything: the batches after
    # the restart are the uninterrupted run's, from the next one on.
    assert resumed.seen == seen[step * 2:]


def test_ignore_data_skip_restarts_the_epoch_from_its_first_batch(full_run, py_sample,
                                                                  tmp_path):
    out, seen = full_run
    # checkpoint-2 is 4 batches into epoch 0: the Trainer runs epoch 0 again from its first
    # batch, and the 7 steps left end 2 batches into epoch 2.
    resumed = example().train(py_sample, tmp_path / "resumed", ignore_data_skip=True,
                              resume=str(out / "checkpoint-2"))
    assert resumed.seen == seen[:14]


def test_the_loader_is_not_wrapped_by_accelerate(py_sample, tmp_path):
    import headrace.hf
    import torch
    import transformers
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                                          max_steps=1)
    trainer = headrace.hf.HeadraceTrainer(model=torch.nn.Linear(1, 1), args=args,
                                          train_loader=example().pipeline(py_sample))
    batches = trainer.get_train_dataloader()
    assert isinstance(batches, headrace.hf.TrainerBatches)
    assert trainer.accelerator.prepare(batches) is batches
    loader = trainer.headrace_loader.loader
    assert (loader.rank, loader.world_size) == (args.process_index, args.world_size)
    trainer.headrace_loader.close()


def test_a_checkpoint_without_the_loader_state_is_refused_naming_the_file(full_run, py_sample,
                                                                         tmp_path):
    out, _ = full_run
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(out / "checkpoint-4", checkpoint)
    (checkpoint / "headrace_loader_rank0.json").unlink()
    with pytest.raises(headrace.ConfigError, match="headrace_loader_rank0.json"):
        example().train(py_sample, tmp_path / "resumed", resume=str(checkpoint))


def test_a_loader_state_from_another_position_is_refused(full_run, py_sample, tmp_path):
    out, _ = full_run
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(out / "checkpoint-4", checkpoint)
    # checkpoint-2's loader state (epoch 0, batch 4) in checkpoint-4 (epoch 1, batch 2).
    shutil.copy(out / "checkpoint-2" / "headrace_loader_rank0.json", checkpoint)
    with pytest.raises(headrace.ConfigError, match="at batch 4 of epoch 0"):
        example().train(py_sample, tmp_path / "resumed", resume=str(checkpoint))



def test_a_custom_accelerate_loop_keeps_the_loader_and_resumes_from_its_state_file(py_sample,
                                                                                   tmp_path):
    import headrace.hf
    import accelerate
    import torch
    import headrace.torch
    accelerator = accelerate.Accelerator(cpu=True)
    loader = headrace.torch.TorchLoader(example().pipeline(py_sample))
    model = torch.nn.Linear(1, 1)
    model, optimizer, prepared = accelerator.prepare(model, torch.optim.SGD(model.parameters(),
                                                                            lr=0.1), loader)
    assert prepared is loader  # not a DataLoader: accelerate passes it through
    seen = []
    for batch in loader:
        seen.append(batch["index"].tolist())
        if len(seen) == 2:
            accelerator.save_state(tmp_path / "ckpt")
            path = headrace.hf.save_loader_state(loader, tmp_path / "ckpt")
    loader.close()
    assert Path(path).name == "headrace_loader_rank0.json"
    again = headrace.torch.TorchLoader(example().pipeline(py_sample))
    headrace.hf.load_loader_state(again, tmp_path / "ckpt")
    assert [batch["index"].tolist() for batch in again] == seen[2:]
    again.close()


def test_a_train_loader_of_another_kind_is_a_config_error(tmp_path):
    import headrace.hf
    import torch
    import transformers
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                                          max_steps=1)
    with pytest.raises(headrace.ConfigError, match="train_loader: list: expected a headrace"):
        headrace.hf.HeadraceTrainer(model=torch.nn.Linear(1, 1), args=args, train_loader=[1])


class FakeMesh:
    def __init__(self, **sizes):
        self.mesh_dim_names, self.sizes = tuple(sizes), sizes

    def __getitem__(self, name):
        return type("Dim", (), {"size": lambda _, n=self.sizes[name]: n})()


class FakeAccelerator:
    def __init__(self, index, count, mesh=None, distributed_type="MULTI_GPU"):
        self.process_index, self.num_processes = index, count
        self.mesh, self.distributed_type = mesh, distributed_type

    def _prepare_device_mesh(self):
        return self.mesh


@pytest.mark.parametrize("accelerator,layout", [
    (FakeAccelerator(5, 8), (5, 8)),
    # (dp_shard, tp) = (4, 2): ranks 0 0 1 1 2 2 3 3, as accelerate splits a DataLoader.
    (FakeAccelerator(5, 8, FakeMesh(dp_shard=4, tp=2)), (2, 4)),
    # (dp_replicate, dp_shard, cp, tp) = (2, 1, 2, 2): 2 data-parallel ranks of 8 processes.
    (FakeAccelerator(5, 8, FakeMesh(dp_replicate=2, dp_shard=1, cp=2, tp=2)), (1, 2)),
    (FakeAccelerator(5, 8, FakeMesh(dp=4, tp=2), distributed_type="DEEPSPEED"), (2, 4)),
])
def test_the_data_parallel_rank_is_accelerates(accelerator, layout):
    import headrace.hf
    assert headrace.hf.data_parallel_layout(accelerator) == layout


def test_a_loader_made_for_another_rank_is_refused(py_sample, tmp_path):
    """A caller-made Loader or TorchLoader for another data-parallel layout than the
    Trainer's would read another rank's batches: a ConfigError naming both."""
    import torch
    import transformers
    from headrace.torch import TorchLoader
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                                          max_steps=1)
    loader = headrace.Loader(example().pipeline(py_sample), rank=1, world_size=2)
    for given in (loader, TorchLoader(loader)):
        with pytest.raises(headrace.ConfigError, match="a loader for rank 1 of 2 given to the "
                                                       "Trainer's data-parallel rank 0 of 1"):
            headrace.hf.HeadraceTrainer(model=torch.nn.Linear(1, 1), args=args,
                                        train_loader=given)
    loader.close()
    mine = headrace.Loader(example().pipeline(py_sample), rank=0, world_size=1)
    trainer = headrace.hf.HeadraceTrainer(model=torch.nn.Linear(1, 1), args=args,
                                          train_loader=mine)
    assert trainer.headrace_loader.loader is mine
    mine.close()


def test_a_damaged_state_file_is_a_config_error_naming_it(py_sample, tmp_path):
    """headrace_loader_rank0.json truncated, empty, nested 200,000 deep, UTF-16, invalid
    UTF-8 or not an object: a ConfigError naming the file, not a bare decoder error."""
    loader = headrace.Loader(example().pipeline(py_sample), rank=0, world_size=1)
    good = json.dumps(loader.state_dict())
    path = Path(headrace.hf.loader_state_path(tmp_path, 0))
    cases = {"truncated": good[:len(good) // 2].encode(), "empty": b"",
             "deep": b"[" * 200_000 + b"]" * 200_000, "utf16": good.encode("utf-16"),
             "bad utf8": b'{"epoch": "\xff\xfe"}', "a list": b"[1, 2]"}
    for name, data in cases.items():
        path.write_bytes(data)
        with pytest.raises(headrace.ConfigError, match=re.escape(str(path)) + ": not a "
                                                       "Headrace loader state"):
            headrace.hf.load_loader_state(loader, tmp_path)
    path.write_text(good)
    assert headrace.hf.load_loader_state(loader, tmp_path) == json.loads(good)
    loader.close()
