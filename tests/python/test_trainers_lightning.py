"""headrace.lightning: a tiny LightningModule fitted on HeadraceDataModule
(examples/lightning_module.py), resumed with ckpt_path with exactly the batches of the
uninterrupted run."""
import functools
import importlib.util
from pathlib import Path

import pytest
import torch

import headrace

REPO = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=None)
def example():
    """examples/lightning_module.py, loaded when a test first runs (it imports Lightning:
    seconds that collecting the suite in every pytest-xdist worker need not spend)."""
    spec = importlib.util.spec_from_file_location("lightning_module",
                                                  REPO / "examples" / "lightning_module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def full_run(py_sample, tmp_path_factory):
    """3 epochs of 6 batches, a checkpoint every 2 steps."""
    out = tmp_path_factory.mktemp("lightning_full")
    model = example().fit(py_sample, out)
    return out, model.seen


def test_fit_takes_each_epoch_of_the_loader_once_in_its_own_order(full_run):
    _, seen = full_run
    assert len(seen) == 18
    epochs = [sorted(i for batch in seen[e * 6:(e + 1) * 6] for i in batch) for e in range(3)]
    assert all(epoch == list(range(48)) for epoch in epochs)
    assert len({tuple(map(tuple, seen[e * 6:(e + 1) * 6])) for e in range(3)}) == 3


# After 4 batches (mid-epoch 0; Lightning had fetched the 5th), 6 (the end of epoch 0) and
# 8 (mid-epoch 1).
@pytest.mark.parametrize("step,position", [(4, (0, 4)), (6, (0, 6)), (8, (1, 2))])
def test_resume_with_ckpt_path_continues_with_the_next_batch(full_run, py_sample, tmp_path,
                                                             step, position):
    out, seen = full_run
    checkpoint = out / f"epoch={(step - 1) // 6}-step={step}.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    [state] = saved["HeadraceDataModule"]["train"]["ranks"]
    assert (state["epoch"], state["batch_in_epoch"]) == position
    # The fit loop's copy (Lightning saves a stateful train loader's state) is the same.
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"] == \
        [saved["HeadraceDataModule"]["train"]]
    resumed = example().fit(py_sample, tmp_path, resume=str(checkpoint))
    assert resumed.seen == seen[step:]


def test_the_data_modules_state_alone_resumes_exactly(full_run, py_sample, tmp_path):
    out, seen = full_run
    saved = torch.load(out / "epoch=0-step=4.ckpt", map_location="cpu", weights_only=False)
    del saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    torch.save(saved, tmp_path / "datamodule_only.ckpt")
    resumed = example().fit(py_sample, tmp_path / "out",
                            resume=str(tmp_path / "datamodule_only.ckpt"))
    assert resumed.seen == seen[4:]


def test_validation_reads_the_same_batches_each_time_and_leaves_training_alone(full_run,
                                                                               py_sample):
    import headrace.lightning
    import lightning.pytorch as pl

    class WithValidation(example().TinyVLM):
        def __init__(self):
            super().__init__()
            self.validated = []

        def validation_step(self, batch, batch_idx):
            self.validated.append(batch["index"].tolist())

    _, seen = full_run
    pl.seed_everything(0, verbose=False)
    model = WithValidation()
    data = headrace.lightning.HeadraceDataModule(
        train=example().pipeline(py_sample),
        val=headrace.Pipeline(source=py_sample / "manifest.jsonl",
                              ops=[headrace.ops.decode(), headrace.ops.resize(shorter_side=64),
                                   headrace.ops.center_crop(56), headrace.ops.normalize()],
                              batch_size=16, seed=2, shuffle=False, cpu_threads=2))
    pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
               enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, num_sanity_val_steps=0).fit(model, datamodule=data)
    assert model.seen == seen[:12]
    assert len(model.validated) == 6  # 3 batches, at the end of each of 2 epochs
    assert model.validated[:3] == model.validated[3:]
    assert sorted(i for batch in model.validated[:3] for i in batch) == list(range(48))


def test_a_state_from_another_pipeline_is_refused_naming_what_differs(full_run, py_sample):
    import headrace.lightning
    out, _ = full_run
    saved = torch.load(out / "epoch=0-step=4.ckpt", map_location="cpu", weights_only=False)
    other = headrace.lightning.HeadraceDataModule(
        train=headrace.Pipeline(source=py_sample / "manifest.jsonl", batch_size=8, seed=2))
    other.load_state_dict(saved["HeadraceDataModule"])
    with pytest.raises(headrace.ConfigError, match="seed: saved 1, this loader 2"):
        other.train_dataloader()


def test_a_checkpoint_without_this_ranks_state_is_refused_naming_the_ranks(full_run, py_sample):
    import headrace.lightning
    out, _ = full_run
    saved = torch.load(out / "epoch=0-step=4.ckpt", map_location="cpu", weights_only=False)
    other = headrace.lightning.HeadraceDataModule(
        train=headrace.Loader(example().pipeline(py_sample), rank=1, world_size=2))
    other.load_state_dict(saved["HeadraceDataModule"])
    with pytest.raises(headrace.ConfigError, match=r"no loader state for rank 1 \(it holds "
                                                   r"ranks \[0\] of world size 1\)"):
        other.train_dataloader()


def test_a_bad_source_is_a_config_error():
    import headrace.lightning
    with pytest.raises(headrace.ConfigError, match="train: list: expected a headrace.Pipeline"):
        headrace.lightning.HeadraceDataModule(train=[1, 2])


def test_a_loader_made_for_another_rank_is_refused(py_sample, tmp_path):
    """A caller-made loader whose rank and world size are not the trainer's data-parallel
    ones would read another rank's batches: a ConfigError naming both, before a step."""
    import lightning.pytorch as pl
    import headrace.lightning
    module = example()
    loader = headrace.Loader(module.pipeline(py_sample), rank=1, world_size=2)
    data = headrace.lightning.HeadraceDataModule(train=loader)
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path))
    with pytest.raises(headrace.ConfigError, match="a loader for rank 1 of 2 given to the "
                                                   "trainer's data-parallel rank 0 of 1"):
        trainer.fit(module.TinyVLM(), datamodule=data)
    loader.close()


def test_two_different_states_for_one_rank_are_refused(py_sample):
    """A checkpoint holding two states for one rank: the same (tensor-parallel peers) is
    that rank's; different ones are a ConfigError, not the first taken silently."""
    import headrace.lightning
    loader = headrace.Loader(example().pipeline(py_sample), rank=0, world_size=1)
    data = headrace.lightning.HeadraceDataModule(train=loader)
    batches = data.train_dataloader()
    state = loader.state_dict()
    batches.load_state_dict({"ranks": [state, dict(state)]})
    other = dict(state, batch_in_epoch=state["batch_in_epoch"] + 1)
    with pytest.raises(headrace.ConfigError, match="2 different loader states for rank 0"):
        batches.load_state_dict({"ranks": [state, other]})
    loader.close()
