"""headrace.doctor from Python: a pipeline with a Python operator the command line cannot
run. A deliberately heavy pure-Python op (it holds the GIL for its whole call) on four CPU
threads is diagnosed as python_gil, named, with worker processes as the advice. The run
is bounded (seconds=2); the verdict rests on where the time goes, not on how fast."""
import pytest

import headrace
from headrace import ops


def heavy(sample):
    total = 0
    for i in range(150_000):  # pure Python: the GIL is held throughout
        total += i
    return {"busy": total % 7}


def test_a_heavy_python_op_is_the_gil_with_worker_processes_advised(make_pipeline):
    pipeline = make_pipeline(extra_ops=[ops.map(heavy, {"busy": ("i64", [])}, name="heavy")],
                             cpu_threads=4, overrides={"trainer.step_ms": 1})
    d = headrace.doctor(pipeline, seconds=2)
    assert d["limit"] == "python_gil", d
    assert d["stage"] == "cpu"
    assert "heavy" in d["summary"]
    held = next(e for e in d["evidence"] if e["name"] == "gil_held heavy")
    assert held["unit"] == "ms/sample" and held["value"] > 0
    assert any("processes=" in a["text"] for a in d["advice"]), d["advice"]
    # The report behind it: the op's GIL wait is measured.
    op = next(o for o in d["report"]["ops"] if o["name"] == "heavy")
    assert op["gil_wait_ms_per_sample"] > 0


def test_doctor_of_a_config_path_with_a_slow_trainer_is_the_consumer(make_pipeline, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(make_pipeline(epochs=1000).to_yaml())
    d = headrace.doctor(config, seconds=2, overrides={"trainer.step_ms": 300})
    assert d["limit"] == "consumer", d
    assert d["advice"] == []


def test_doctor_refuses_bad_arguments(make_pipeline):
    with pytest.raises(headrace.ConfigError, match="seconds"):
        headrace.doctor(make_pipeline(), seconds=0)
    with pytest.raises(headrace.ConfigError, match="overrides"):
        headrace.doctor(make_pipeline(), seconds=1, overrides={"batch.size": 2})


def test_an_op_in_worker_processes_is_not_metered_as_waiting_for_the_gil(make_pipeline):
    pipeline = make_pipeline(
        extra_ops=[ops.map(heavy, {"busy": ("i64", [])}, processes=2, name="heavy")],
        overrides={"trainer.step_ms": 1})
    loader = headrace.Loader(pipeline)
    next(iter(loader))
    op = next(o for o in loader.report()["ops"] if o["name"] == "heavy")
    loader.close()
    assert "gil_wait_ms_per_sample" not in op
