"""End-to-end tests of `headrace plan`: the sources' 16.5 h example, the instance presets,
the CPU cost read from a real run report and a `bench ops` report, a YAML plan file, and
bad input rejected with exit code 2 naming the flag."""
import json

import pytest

from e2e_util import read_report, run_headrace, write_config

# README.md's documented command for the sources' example (MISSION.md: 500 TB raw, 2x;
# 1.5 h to read 500 TB, 3 h to write 1 PB, 12 h for the GPU fleet to read 1 PB).
SOURCES_EXAMPLE = ["--dataset-tb", 500, "--expansion", 2, "--read-gb-per-s", 92.59,
                   "--write-gb-per-s", 92.59, "--gpu-read-gb-per-s", 23.15]

CPU = ["--instance", "p4d.24xlarge", "--cpu-ms-per-sample", 10, "--gpu-step-ms", 100,
       "--batch-size", 32]


def plan_json(headrace_bin, *args):
    proc = run_headrace(headrace_bin, "plan", *args, "--json")
    return json.loads(proc.stdout)


def test_the_sources_example_prints_sixteen_and_a_half_hours(headrace_bin):
    for args in (["--preset", "sources-example"], SOURCES_EXAMPLE):
        proc = run_headrace(headrace_bin, "plan", *args)
        lines = {line.split("  ")[1].strip(): line for line in proc.stdout.splitlines()
                 if line.startswith("  ")}
        assert "16.50 h" in lines["materialize: all I/O"], proc.stdout
        assert "1.50 h" in lines["read raw"], proc.stdout
        assert "3.00 h" in lines["write expanded"], proc.stdout
        assert "12.00 h" in lines["read expanded, per epoch"], proc.stdout
        assert "1.50 h" in lines["stream: read raw each epoch"], proc.stdout
        io = plan_json(headrace_bin, *args)["io"]
        assert io["materialize_io_hours"] == pytest.approx(16.5, abs=0.005)
        assert io["streaming_io_hours"] == pytest.approx(1.5, abs=0.001)


def test_a_flag_overrides_the_preset(headrace_bin):
    io = plan_json(headrace_bin, "--preset", "sources-example", "--epochs", 2,
                   "--gpu-read-gb-per-s", 46.2963)["io"]
    # 1.5 + 3 + 2 x 6 h; streaming reads the raw data twice.
    assert io["materialize_io_hours"] == pytest.approx(16.5, abs=0.001)
    assert io["streaming_io_hours"] == pytest.approx(3.0, abs=0.001)


def test_instance_presets_give_the_sources_vcpus_per_gpu(headrace_bin):
    p4d = plan_json(headrace_bin, *CPU)["cpu"]
    assert (p4d["vcpus_per_node"], p4d["gpus_per_node"], p4d["instance_vcpus_per_gpu"]) == \
        (96, 8, 12)
    assert p4d["samples_per_s_per_gpu"] == pytest.approx(320)
    assert p4d["vcpus_per_gpu_no_wait"] == pytest.approx(320 * 0.010 / 0.9)
    p5 = plan_json(headrace_bin, *CPU[2:], "--instance", "p5.48xlarge")["cpu"]
    assert (p5["vcpus_per_node"], p5["instance_vcpus_per_gpu"]) == (192, 24)
    custom = plan_json(headrace_bin, *CPU[2:], "--instance", "custom", "--vcpus-per-node", 64,
                       "--gpus-per-node", 4, "--reserved-vcpus-per-gpu", 0)["cpu"]
    assert custom["own_vcpus_per_gpu"] == 16


def test_a_heavy_pipeline_needs_cpu_nodes_and_starves_on_its_own_vcpus(headrace_bin):
    # 320 samples/s per GPU x 125 ms / 1.0 = 40 vCPUs per GPU; p4d leaves 10 per GPU.
    cpu = plan_json(headrace_bin, *CPU[:2], "--cpu-ms-per-sample", 125, "--gpu-step-ms", 100,
                    "--batch-size", 32, "--cpu-efficiency", 1, "--target-wait-ratio", 0,
                    "--gpus", 64, "--cpu-node-vcpus", 64)["cpu"]
    assert cpu["gpu_utilization_own_vcpus"] == pytest.approx(0.25)
    assert cpu["cpu_only_nodes_per_gpu_node"] == pytest.approx(8 * 30 / 64)
    assert (cpu["gpu_nodes"], cpu["cpu_only_nodes_total"]) == (8, 30)
    # More CPU per sample: more vCPUs.
    heavier = plan_json(headrace_bin, *CPU[:2], "--cpu-ms-per-sample", 250, *CPU[4:])["cpu"]
    lighter = plan_json(headrace_bin, *CPU)["cpu"]
    assert heavier["vcpus_per_gpu_for_target"] > lighter["vcpus_per_gpu_for_target"]


def test_cost_from_a_run_report(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report_path = tmp_path / "out" / "run-report.json"
    run_headrace(headrace_bin, "run", config, "--report", report_path, "--quiet")
    report = read_report(report_path)
    stage = next(s for s in report["stages"] if s["name"] == "cpu")
    expected = stage["busy_s"] * stage["concurrency"] / stage["items"]
    assert expected > 0

    cpu = plan_json(headrace_bin, "--from-report", report_path, *CPU[:2], *CPU[4:])["cpu"]
    assert cpu["cpu_seconds_per_sample"] == pytest.approx(expected, rel=1e-9)
    assert str(report_path) in cpu["cpu_seconds_per_sample_source"]
    assert "cpu stage" in cpu["cpu_seconds_per_sample_source"]
    text = run_headrace(headrace_bin, "plan", "--from-report", report_path, *CPU[:2],
                        *CPU[4:]).stdout
    assert f"{expected * 1e3:.3f} ms" in text, text

    # And from `bench ops --report`: its one-thread total.
    bench_path = tmp_path / "bench-ops.json"
    run_headrace(headrace_bin, "bench", "ops", config, "--samples", 8, "--report", bench_path)
    bench = json.loads(bench_path.read_text())
    cpu = plan_json(headrace_bin, "--from-report", bench_path, *CPU[:2], *CPU[4:])["cpu"]
    assert cpu["cpu_seconds_per_sample"] == pytest.approx(bench["total_ms_per_sample"] / 1e3)
    assert "bench ops" in cpu["cpu_seconds_per_sample_source"]


def test_a_plan_file_with_flags_winning(tmp_path, headrace_bin):
    plan = tmp_path / "plan.yaml"
    plan.write_text("preset: sources-example\ninstance: p5.48xlarge\ncpu_ms_per_sample: 10\n"
                    "gpu_step_ms: 100\nbatch_size: 32\ngpus: 16\n")
    both = plan_json(headrace_bin, plan, "--cpu-seconds-per-sample", 0.02)
    assert both["io"]["materialize_io_hours"] == pytest.approx(16.5)
    assert both["cpu"]["gpus"] == 16 and both["cpu"]["gpu_nodes"] == 2
    assert both["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.02)
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset_tb: -3\nexpansion: 2\n")
    proc = run_headrace(headrace_bin, "plan", bad, check=False)
    assert proc.returncode == 2 and "--dataset-tb must be > 0" in proc.stderr, proc.stderr
    assert str(bad) in proc.stderr
    bad.write_text("dataset_tb: 500\nread_gbps: 3\n")
    proc = run_headrace(headrace_bin, "plan", bad, check=False)
    assert proc.returncode == 2 and "unknown input 'read_gbps'" in proc.stderr, proc.stderr
    assert "read-gb-per-s" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--preset", "sources-example", "--read-gb-per-s", 0], "--read-gb-per-s must be > 0 (got 0)"),
    (["--preset", "sources-example", "--write-gb-per-s", -1], "--write-gb-per-s must be > 0"),
    (["--preset", "sources-example", "--gpu-read-gb-per-s", 0], "--gpu-read-gb-per-s must be > 0"),
    (["--preset", "sources-example", "--dataset-tb", -500], "--dataset-tb must be > 0"),
    (["--preset", "sources-example", "--expansion", -2], "--expansion must be > 0"),
    (["--preset", "sources-example", "--dataset-tb", "lots"], "--dataset-tb needs a number"),
    (["--samples", 10, "--sample-mb", -1], "--sample-mb must be > 0"),
    ([*CPU[:6], "--gpu-step-ms", 0], "--gpu-step-ms must be > 0 (got 0)"),
    ([*CPU[2:], "--instance", "p3.16xlarge"],
     "--instance: unknown instance 'p3.16xlarge' (allowed: p4d.24xlarge, p5.48xlarge, custom)"),
    ([*CPU[2:]], "--instance is required"),
    ([*CPU, "--batch-size", 0], "--batch-size must be a whole number >= 1"),
    ([*CPU, "--target-wait-ratio", 1], "--target-wait-ratio must be in [0, 1)"),
    ([*CPU, "--vcpus-per-node", 100], "--vcpus-per-node is for --instance custom"),
    ([*CPU, "--cpu-seconds-per-sample", 1], "give one of --cpu-ms-per-sample"),
    (["--preset", "nope"], "--preset: unknown preset 'nope' (allowed: sources-example)"),
    (["--gpu-step", 5], "unknown flag '--gpu-step'"),
    (["--gpus"], "--gpus needs a value"),
    ([], "nothing to plan"),
    (["--from-report", "/nonexistent/report.json", *CPU[:2], *CPU[4:]],
     "--from-report /nonexistent/report.json: cannot read"),
])
def test_bad_input_exits_2_naming_the_flag(headrace_bin, args, message):
    proc = run_headrace(headrace_bin, "plan", *args, check=False)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert message in proc.stderr, (args, proc.stderr)
    assert proc.stdout == "", "nothing is computed or printed for bad input"


def test_a_report_without_a_cost_exits_2(tmp_path, headrace_bin):
    for text, message in [("{not json", "not a JSON object"),
                          ('{"samples": 0, "stages": [], "ops": []}', "holds no CPU cost")]:
        path = tmp_path / "r.json"
        path.write_text(text)
        proc = run_headrace(headrace_bin, "plan", "--from-report", path, *CPU[:2], *CPU[4:],
                            check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
