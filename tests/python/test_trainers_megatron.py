"""headrace.megatron in Megatron-Core's real rank grid: 4 processes (gloo) running
examples/megatron_data.py, parallel_state initialized as TP x PP x DP in turn."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import headrace
import headrace.megatron

REPO = Path(__file__).resolve().parents[2]
WORLD = 4
# layout -> (tp, pp, cp, dp): grids of 4 ranks Megatron allows, and the reader choices.
LAYOUTS = {
    "1x1": (1, 1, 1, 4), "2x1": (2, 1, 1, 2), "1x2": (1, 2, 1, 2), "1x4": (1, 4, 1, 1),
    "1x1x2": (1, 1, 2, 2), "2x1:first_last:first": (2, 1, 1, 2), "1x4:all": (1, 4, 1, 1),
}
RESUME_AFTER = 2


@pytest.fixture(scope="module")
def records(py_sample, tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron") / "ranks.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "megatron_data.py"), "--data", str(py_sample),
         "--world-size", str(WORLD), "--layouts", *LAYOUTS, "--resume-after", str(RESUME_AFTER),
         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    by_layout = {}
    for r in json.loads(out.read_text()):
        by_layout.setdefault(r["layout"], {})[r["rank"]] = r
    return by_layout


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dp_rank_and_size_come_from_parallel_state_as_megatron_lays_ranks_out(records, layout):
    tp, pp, cp, dp = LAYOUTS[layout]
    for rank, r in records[layout].items():
        # Megatron's default order "tp-cp-ep-dp-pp": TP varies fastest, then CP, DP, PP.
        assert (r["tp_rank"], r["cp_rank"], r["dp_rank"], r["pp_rank"]) == \
            (rank % tp, rank // tp % cp, rank // (tp * cp) % dp, rank // (tp * cp * dp)), r
        assert (r["dp_size"], r["cp_size"], r["pp_size"]) == (dp, cp, pp)
        assert r["first_stage"] == (r["pp_rank"] == 0)
        assert r["last_stage"] == (r["pp_rank"] == pp - 1)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_peers_of_a_dp_rank_read_its_batches_and_dp_ranks_split_the_epoch(records, layout):
    tp, pp, cp, dp = LAYOUTS[layout]
    _, *choices = layout.split(":")
    stages = choices[0] if choices else "first_last"
    tensor_parallel = choices[1] if len(choices) > 1 else "all"
    per_dp = {}
    for r in records[layout].values():
        reads = (stages == "all" or r["first_stage"] or r["last_stage"]) and \
            (tensor_parallel == "all" or r["tp_rank"] == 0)
        assert (r["batches"] is not None) == reads, r
        if reads:
            # Every reader of one DP rank (TP, CP and PP peers) gets the very same batches.
            assert per_dp.setdefault(r["dp_rank"], r["batches"]) == r["batches"]
    assert sorted(per_dp) == list(range(dp))
    # DP ranks are disjoint and together cover the epoch (48 samples, batch 4).
    samples = [i for batches in per_dp.values() for batch in batches for i in batch]
    assert sorted(samples) == list(range(48))
    assert all(len(batches) == 12 // dp for batches in per_dp.values())


def test_save_state_then_restore_state_continues_with_the_next_batch(records):
    for layout in LAYOUTS:
        for r in records[layout].values():
            if r["batches"] is not None:
                assert r["resumed"] == r["batches"][RESUME_AFTER:], (layout, r["rank"])


def test_bad_choices_are_config_errors_naming_the_key_and_the_values():
    with pytest.raises(headrace.ConfigError,
                       match="pipeline_stages: 'middle': allowed values: first_last, all"):
        headrace.megatron.datasets_provider(train=None, pipeline_stages="middle")
    with pytest.raises(headrace.ConfigError,
                       match="tensor_parallel: 'none': allowed values: all, first"):
        headrace.megatron.datasets_provider(train=None, tensor_parallel="none")


def test_saved_state_path_is_megatron_lms_file_name(tmp_path):
    assert headrace.megatron.saved_state_path("ckpt", 20, 3, True) == \
        "ckpt/iter_0000020/mp_rank_00_000/train_dataloader_dprank003.pt"
    assert headrace.megatron.saved_state_path("ckpt", 20, 3, False) == \
        "ckpt/iter_0000020/mp_rank_00/train_dataloader_dprank003.pt"


class FakeParallelState:
    """parallel_state's functions that headrace.megatron calls, for one rank."""

    def __init__(self, initialized=True, pp_size=2, pp_rank=0, tp_rank=0, dp=(0, 1)):
        self.initialized, self.pp_size, self.pp_rank, self.tp_rank = \
            initialized, pp_size, pp_rank, tp_rank
        self.dp_rank, self.dp_size = dp

    def model_parallel_is_initialized(self):
        return self.initialized

    def get_pipeline_model_parallel_world_size(self):
        return self.pp_size

    def get_pipeline_model_parallel_rank(self):
        return self.pp_rank

    def get_tensor_model_parallel_rank(self):
        return self.tp_rank

    def get_context_parallel_rank(self):
        return 0

    def get_context_parallel_world_size(self):
        return 1

    def get_data_parallel_rank(self):
        return self.dp_rank

    def get_data_parallel_world_size(self):
        return self.dp_size

    def is_pipeline_first_stage(self, ignore_virtual=True):
        return self.pp_rank == 0

    def is_pipeline_last_stage(self, ignore_virtual=True):
        return self.pp_rank == self.pp_size - 1


def test_a_loader_made_for_another_rank_is_refused(make_pipeline):
    loader = headrace.Loader(make_pipeline(), rank=1, world_size=2)
    provider = headrace.megatron.datasets_provider(
        train=loader, device=None, parallel_state=FakeParallelState(dp=(0, 2)))
    with pytest.raises(headrace.ConfigError,
                       match="a loader for rank 1 of 2 given to data-parallel rank 0 of 2"):
        provider(None)
    loader.close()


def test_a_middle_stage_gets_no_iterators_and_reads_nothing(make_pipeline):
    provider = headrace.megatron.datasets_provider(
        train=make_pipeline(), valid=make_pipeline(), device=None,
        parallel_state=FakeParallelState(pp_size=3, pp_rank=1))
    assert provider(None) == (None, None, None)


def test_saved_state_reads_what_megatron_lms_dataloader_save_writes(tmp_path):
    import torch
    path = Path(headrace.megatron.saved_state_path(tmp_path, 7, 1, True))
    path.parent.mkdir(parents=True)
    torch.save({"dataloader_state_dict": {"epoch": 2, "batch_in_epoch": 3}}, path)
    load = headrace.megatron.saved_state(tmp_path, 7, parallel_state=FakeParallelState())
    assert load(1) == {"epoch": 2, "batch_in_epoch": 3}
    with pytest.raises(headrace.ConfigError, match="train_dataloader_dprank000.pt: no dataloader"):
        load(0)
    # No --dataloader-save, or iteration 0: start at the beginning.
    assert headrace.megatron.saved_state(None, 7)(0) is None
    assert headrace.megatron.saved_state(tmp_path, 0)(1) is None


def test_an_uninitialized_parallel_state_is_a_config_error():
    with pytest.raises(headrace.ConfigError, match="initialize_model_parallel"):
        headrace.megatron.layout(FakeParallelState(initialized=False))


def test_megatron_batches_run_on_across_epochs_and_restore_mid_epoch(make_pipeline):
    import headrace.torch
    batches = headrace.megatron.MegatronBatches(
        headrace.torch.TorchLoader(make_pipeline()), to_inputs=lambda b: b["index"].tolist())
    assert len(batches) == 6
    taken = [next(batches) for _ in range(8)]  # epoch 0, then 2 batches of epoch 1
    state = batches.save_state()
    assert (state["epoch"], state["batch_in_epoch"]) == (1, 2)
    later = [next(batches) for _ in range(6)]
    batches.close()
    assert sorted(i for b in taken[:6] for i in b) == list(range(48)) and taken[6:] != taken[:2]
    restored = headrace.megatron.MegatronBatches(headrace.torch.TorchLoader(make_pipeline()),
                                                 to_inputs=lambda b: b["index"].tolist())
    restored.restore_state(state)
    assert [next(restored) for _ in range(6)] == later
    restored.close()


class _RunsCode:
    """Pickled, it creates a marker file when unpickled (what a hostile state file does)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_saved_state_from_elsewhere_runs_no_code(tmp_path):
    """A state file holding a pickled object is refused naming the file; nothing in it
    runs (torch.load weights_only). A file without the state's key is named too."""
    import torch
    marker = tmp_path / "ran"
    path = Path(headrace.megatron.saved_state_path(tmp_path, 7, 0, True))
    path.parent.mkdir(parents=True)
    torch.save({"dataloader_state_dict": _RunsCode(marker)}, path)
    load = headrace.megatron.saved_state(tmp_path, 7, parallel_state=FakeParallelState())
    with pytest.raises(headrace.ConfigError, match=r"train_dataloader_dprank000.pt: not a "
                                                   r"dataloader state of plain data"):
        load(0)
    assert not marker.exists()
    torch.save({"other": 1}, path)
    with pytest.raises(headrace.ConfigError, match="no dataloader_state_dict in it"):
        load(0)
