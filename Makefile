# The two commands a newcomer types: `make run` and `make test`. See README.md.
BUILD    ?= build
JOBS     ?= $(shell nproc)
SAMPLES  ?= 1000
DATA     := data/sample
CMAKE_FLAGS ?=
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_TARGETS := decode manifest config tokenize hf_tokenize chat_template tar parquet pointcloud video audio state

PY       := .venv/bin/python

# One compiler name for every build folder: CMake alone picks /usr/bin/c++, pip's build
# (scikit-build-core) g++, and ccache keys on the name, so with two names the Python
# build of the same sources missed the cache and compiled the whole core a second time.
export CXX ?= g++

.PHONY: all setup build python run test unit e2e asan tsan tsa fuzz fuzz-smoke bench bench-python bench-io bench-shards bench-epochs run-ray bench-ray bench-ray-netns bench-manifest bench-tokenize bench-media bench-pointcloud bench-metrics bench-balance bench-vlm bench-vlm-torchvision bench-vlm-video bench-media-torchcodec bench-mix bench-elastic clean

all: build

setup:
	@scripts/setup.sh

# Configure once, then let ninja decide what to rebuild.
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)
	@$(MAKE) --no-print-directory python

# The Python package (`import headrace`) into .venv: scikit-build-core builds the same
# C++ core with the nanobind bindings in build-py/ (incremental).
python: setup
	$(PY) -m pip install -q --no-build-isolation .

$(DATA)/manifest.jsonl:
	$(BUILD)/headrace make-sample --out $(DATA) --samples $(SAMPLES)

# The main job: the example pipeline on the sample dataset, against a simulated trainer.
run: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(BUILD)/headrace run examples/vqa.yaml --report out/run-report.json
	@echo "report: out/run-report.json"
	$(PY) examples/python_loader.py

# The example pipeline disaggregated (python/headrace/ray): a local 3-node Ray cluster
# (ray.cluster_utils: a trainer node, two CPU nodes with a headrace_cpu resource), worker
# actors spread over the CPU nodes, two trainer ranks pulling their batches by reference.
run-ray: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) examples/ray_run.py --config examples/vqa.yaml

# Every test: unit tests, end-to-end tests, then the suite under ASan/UBSan (a short
# mutation run of every fuzz target included: fuzz_smoke.* in ctest) and the executor's
# tests under TSan. libFuzzer itself (a clang build of its own) is `make fuzz-smoke` /
# `make fuzz`: left out here, it would add ~5 minutes of build to every CI run.
test: build
	@$(MAKE) --no-print-directory unit e2e asan tsan

# Batches byte for byte before and after a change (bench/digests.py): every example
# pipeline, every source kind, packed, max_tokens and blended, run by BEFORE's binary
# (built in a worktree under .gl/, its ccache shared) and by this tree's; exits 1 if any
# differ. `make check-digests BEFORE=main` (after a build of BEFORE's CLI).
BEFORE ?= HEAD
# The hostile-input probe of issue 50, rerun (tests/probe/hostile.py): each case a run
# of its own under a watchdog (wall time, peak RSS), with its verdict; not in `make test`.
.PHONY: probe-hostile
probe-hostile: build
	$(PY) scripts/fetch_vocabs.py
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) tests/probe/hostile.py $(BUILD)/headrace

.PHONY: check-digests
check-digests: build
	@rm -rf .gl/digests-before && git worktree prune
	git worktree add --detach .gl/digests-before $(BEFORE)
	ln -s $(abspath .venv) .gl/digests-before/.venv
	cd .gl/digests-before && CCACHE_BASEDIR=$(abspath .) cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && CCACHE_BASEDIR=$(abspath .) cmake --build build -j $(JOBS) --target headrace
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	test -f data/multimodal/manifest.jsonl || $(BUILD)/headrace make-sample --out data/multimodal --samples 48 --modalities all --shards
	$(PY) bench/digests.py --old .gl/digests-before/build/headrace --new $(BUILD)/headrace
	git worktree remove --force .gl/digests-before

# The self-contained wheels (docs/wheels.md; scripts/build_wheel.sh):
# dist/headrace-<v>-cp310-cp310-manylinux_2_36_x86_64.whl, ...-cp311-cp311-... and
# ...-cp312-abi3-... (3.12 and later), each under 50 MiB, each with an Arrow bridge per
# pyarrow release 15 to 26. Build folders, the minimal FFmpeg they link, the build
# environments and the pyarrow wheels the bridges compile against are cached in .whl/.
.PHONY: wheel wheel-manylinux test-wheel gpu-bundle
wheel:
	JOBS=$(JOBS) scripts/build_wheel.sh

# The same wheels for glibc 2.28 (manylinux_2_28: RHEL 8+, Debian 10+, Ubuntu 20.04+),
# compiled against a Debian 11 sysroot (scripts/build_wheel_manylinux.sh; root). They
# replace `make wheel`'s in dist/. From nothing ~25 minutes on 2 shared cores (measured
# in parts, not in one run: the Debian 11 root 2, the libraries built for it ~9, FFmpeg
# 7 of them, the two wheels 11 with ccache partly warm), then 1.5 with nothing changed
# (measured before the cp310 wheel and the Arrow bridges were added).
wheel-manylinux:
	JOBS=$(JOBS) scripts/build_wheel_manylinux.sh

# The wheels installed and run in a Debian 12 root file system with none of our build
# dependencies (tests/wheel/run.sh; root), after each wheel's manylinux tag is checked to
# be the one `auditwheel show` finds (tests/wheel/tags.sh). Not part of `make test`, which CI runs and
# which must stay under 30 minutes: from a fresh worktree `make wheel` takes ~6 minutes
# on 2 cores (the minimal FFmpeg ~3 of them; the C++ core from ccache), then ~2, and
# `make test-wheel` ~4 (debootstrap), then ~3. Intended schedule: nightly and before every
# release, on the same kind of machine as CI, as `make wheel test-wheel` (.ci/run runs
# `make test` only and is not changed).
# With a wheel for glibc 2.31 or older in dist/ (`make wheel-manylinux`), it also runs in
# a Debian 11 root (glibc 2.31; tests/wheel/run.sh bullseye, ~1.5-3 minutes; the first
# time ~2 more for its debootstrap and ~7 each for the CPython 3.11 and 3.13 it builds
# for that root).
test-wheel:
	tests/wheel/tags.sh
	tests/wheel/run.sh
	@if ls dist/headrace-*-cp311-cp311-manylinux_2_[23][0-9]_x86_64.whl 2>/dev/null | \
	    grep -qE 'manylinux_2_(2[0-9]|3[01])_'; then \
	  tests/wheel/run.sh bullseye; \
	else \
	  echo "test-wheel: the cp311 wheel in dist/ needs glibc > 2.31: Debian 11 skipped (make wheel-manylinux)"; \
	fi

# The sdist (tests/test_sdist.py checks what it holds in `make test`): `make sdist` writes
# it to dist/; `make test-sdist` builds a wheel from it alone and runs it (~10 minutes).
.PHONY: sdist test-sdist
sdist: setup
	$(PY) -c "from scikit_build_core.build import build_sdist; print('dist/' + build_sdist('dist'))"

test-sdist: setup
	PY=$(abspath $(PY)) JOBS=$(JOBS) scripts/test_sdist.sh

# The trainer extras ([hf], [lightning], [megatron]) at both ends of their ranges in
# pyproject.toml: a fresh environment for each under .gl/extras/, with the package `make
# build` installed into .venv copied in (nothing compiles there), and the extra's tests; a
# table of versions and counts, exit 1 on any failed or skipped test
# (scripts/test_extras.sh). Not in `make test`: ~12 minutes.
.PHONY: test-extras
test-extras: build
	scripts/test_extras.sh

# What `make test-gpu` needs on a GPU machine that has only Python 3.12 and torch (no
# network, nothing built): the abi3 wheel and Arrow's two libraries, in dist/gpu/
# (tests/gpu/bundle.sh; under 64 MiB, what that machine receives at once).
gpu-bundle: wheel
	tests/gpu/bundle.sh

# The GPU hand-off on a machine with a CUDA device (tests/gpu/README.md): pinned batches,
# 2,000 batches with GPU checksums against the host's, copy/step overlap, no pinned
# allocation per batch, H2D bandwidth, and the out-of-memory error.
.PHONY: test-gpu
# On the GPU machine this builds nothing: with dist/gpu/ there (`make gpu-bundle`, here)
# check.sh installs that wheel; without it, it uses .venv's package (`make build`).
test-gpu: $(if $(wildcard dist/gpu/headrace-*.whl),,build)
	tests/gpu/check.sh --json out/gpu_check.json

unit:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The binary's end-to-end tests and the Python package's tests (tests/python), in two
# processes (pytest-xdist), one test file at a time each; then the Ray tests alone: their
# coordinator restarts and leases time out under the load of the other files' process
# groups (they failed beside test_elastic's and the trainers' gloo processes, and pass
# alone).
# Each test is stopped (and fails) after E2E_TEST_TIMEOUT seconds (pytest-timeout): the
# longest take about a minute, and a hang once held CI for its whole 90 minutes.
E2E_PROCS ?= 2
E2E_TEST_TIMEOUT ?= 600
e2e:
	HEADRACE_BIN=$(abspath $(BUILD))/headrace $(PY) -m pytest -q -n $(E2E_PROCS) --dist loadfile --timeout $(E2E_TEST_TIMEOUT) tests --ignore=tests/python/test_ray.py
	HEADRACE_BIN=$(abspath $(BUILD))/headrace $(PY) -m pytest -q --timeout $(E2E_TEST_TIMEOUT) tests/python/test_ray.py

asan: setup
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEADRACE_SANITIZE=address
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# The engine's layers under TSan: the memory pools (core), the scheduler and its stages,
# storage, the sources, the pipeline (loader, planner, op battery) and what watches a run.
TSAN_TESTS := core exec io formats pipeline observe
tsan: setup tsa
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHEADRACE_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS) --target $(foreach t,$(TSAN_TESTS),hr_$(t)_test)
	set -e; for t in $(TSAN_TESTS); do \
	  TSAN_OPTIONS=halt_on_error=1 build-tsan/src/headrace/$$t/hr_$${t}_test --gtest_brief=1; done

# Clang's thread-safety analysis over the engine (exec/thread_annotations.h): every
# member HR_GUARDED_BY a lock is touched with it held, or this fails. A syntax-only pass,
# a few seconds.
tsa:
	set -e; for f in $(filter-out %_test.cc,$(wildcard src/headrace/exec/*.cc)); do \
	  clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -Isrc $$f; done

# Fuzzing (fuzz/README.md): each libFuzzer target for FUZZ_SECONDS under ASan/UBSan,
# built with clang in $(FUZZ_BUILD); corpora grow in fuzz-corpus/, crashing inputs land
# in fuzz-crashes/ and make this fail.
fuzz: setup
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++ -DHEADRACE_FUZZ=ON -DHEADRACE_BUILD_TESTS=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target hr_fuzz_seeds $(addprefix hr_fuzz_,$(FUZZ_TARGETS))
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)

# Benchmarks: results go into bench/RESULTS.md by hand, with command, machine and date.
bench: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(BUILD)/headrace bench engine examples/vqa.yaml --report bench/engine.json

# Headrace vs the PyTorch DataLoader (PIL, 2 workers), results into bench/RESULTS.md by hand.
bench-python: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) bench/vs_dataloader.py --data $(DATA) --samples $(SAMPLES) --json bench/python.json

# A Qwen2-VL SFT batch (issue 27): Headrace's image.decode -> smart_resize -> patchify ->
# tokenize chain against transformers' Qwen2VLProcessor in a PyTorch DataLoader (PIL,
# 2 workers), same samples and outputs (checked), on the VLM mix of make-sample: samples/s,
# tokens/s and pad-to-longest padding (bench/vlm_processor.json; numbers into
# bench/RESULTS.md by hand). VLM_SAMPLES records are made; the run takes BENCH_VLM_ARGS.
VLM_DATA    := data/vlm
VLM_SAMPLES ?= 256
BENCH_VLM_ARGS ?=
$(VLM_DATA)/manifest.jsonl:
	$(BUILD)/headrace make-sample --out $(VLM_DATA) --samples $(VLM_SAMPLES) --mix vlm

# Balanced steps (issue 49): each world size's step imbalance as the order deals the
# steps and as batch.balance deals them, from the plan (no process per rank), for three
# costs; the size index's build; then one rank's samples/s with balancing off, on, and on
# with the index; and the cost model against a small Qwen2-VL's CPU time (bench/RESULTS.md).
BALANCE_SAMPLES ?= 4096
BALANCE_DATA    := data/vlm-balance
$(BALANCE_DATA)/manifest.jsonl:
	$(BUILD)/headrace make-sample --out $(BALANCE_DATA) --samples $(BALANCE_SAMPLES) --mix vlm
bench-balance: build
	$(PY) scripts/fetch_vocabs.py
	@$(MAKE) --no-print-directory $(BALANCE_DATA)/manifest.jsonl
	for cost in tokens qwen2_vl qwen3_vl; do \
	  $(BUILD)/headrace bench balance examples/qwen2_vl.yaml --epochs 16 --cost $$cost \
	    --set source.manifest=$(BALANCE_DATA)/manifest.jsonl \
	    --report bench/balance_$$cost.json || exit 1; done
	$(BUILD)/headrace index sizes examples/qwen2_vl.yaml \
	  --set source.manifest=$(BALANCE_DATA)/manifest.jsonl --out $(BALANCE_DATA)/sizes.idx
	$(PY) bench/balance_rank.py --data $(BALANCE_DATA) --index $(BALANCE_DATA)/sizes.idx \
	  --batches 48
	$(PY) bench/balance_cost_check.py --samples 32 --repeats 2

bench-vlm: build
	$(PY) scripts/fetch_vocabs.py
	@$(MAKE) --no-print-directory $(VLM_DATA)/manifest.jsonl
	$(PY) bench/vlm_processor.py --data $(VLM_DATA) --json bench/vlm_processor.json $(BENCH_VLM_ARGS)

# The same comparison with transformers' torchvision image processor as well, from a venv
# of its own (.venv-tv, bench/requirements-torchvision.txt: torchvision does not import
# beside .venv's CPU torch) with headrace from the wheel (bench/vlm_processor_torchvision.json).
TV_VENV := .venv-tv
bench-vlm-torchvision: wheel
	$(PY) scripts/fetch_vocabs.py
	@$(MAKE) --no-print-directory $(VLM_DATA)/manifest.jsonl
	[ -x $(TV_VENV)/bin/python ] || python3 -m venv $(TV_VENV)
	$(TV_VENV)/bin/python -m pip install -q -r bench/requirements-torchvision.txt
	$(TV_VENV)/bin/python -m pip install -q --force-reinstall --no-deps $$(ls dist/headrace-*-cp311-*.whl)
	$(TV_VENV)/bin/python bench/vlm_processor.py --data $(VLM_DATA) --json bench/vlm_processor_torchvision.json $(BENCH_VLM_ARGS)

# The video loaders' comparison (bench/video_loaders.py) with torchcodec as well, from
# .venv-tv (bench/requirements-torchcodec.txt says why) and headrace from the wheel.
bench-media-torchcodec: wheel
	[ -x $(TV_VENV)/bin/python ] || python3 -m venv $(TV_VENV)
	$(TV_VENV)/bin/python -m pip install -q -r bench/requirements-torchvision.txt -r bench/requirements-torchcodec.txt
	$(TV_VENV)/bin/python -m pip install -q --force-reinstall --no-deps $$(ls dist/headrace-*-cp311-*.whl)
	$(TV_VENV)/bin/python bench/video_loaders.py --json bench/video_loaders_torchcodec.json

# Qwen2-VL video: video.patchify (the source build, in .venv) against transformers'
# Qwen2VLVideoProcessor decoding with torchcodec in a DataLoader (in .venv-tv, where
# torchvision and torchcodec import), each run a process of its own (bench/vlm_video.json).
.PHONY: bench-vlm-video
bench-vlm-video: build
	[ -x $(TV_VENV)/bin/python ] || python3 -m venv $(TV_VENV)
	$(TV_VENV)/bin/python -m pip install -q -r bench/requirements-torchvision.txt -r bench/requirements-torchcodec.txt
	$(PY) bench/vlm_video.py --ref-python $(TV_VENV)/bin/python --json bench/vlm_video.json

# The wait for each epoch's first batch, with and without prefetch across epochs.
bench-epochs: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) bench/epoch_boundary.py --epochs 11 --samples 256 --json bench/epochs.json

# Object storage: reads through a local server with 20 ms injected latency, then the
# pipeline end to end from local disk and from that server (bench/io.json, io_e2e.json).
# What watching a run costs: throughput with the metrics endpoint scraped 1/s and 10/s
# against none, interleaved (bench/metrics_cost.py; results in bench/RESULTS.md).
bench-metrics: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) bench/metrics_cost.py --binary $(BUILD)/headrace --config examples/vqa.yaml --runs 5 --json bench/metrics.json

bench-io: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(BUILD)/headrace bench io --report bench/io.json --config examples/vqa.yaml --samples 1000

# Loose files vs tar shards from the 20 ms latency object server: samples/s and requests
# per sample side by side (bench/shards.json; numbers into bench/RESULTS.md by hand).
bench-shards: build
	$(PY) bench/shards.py --bin $(BUILD)/headrace --json bench/shards.json

# The same samples as one source and as a blend of three (source.mix), alternated, medians
# (bench/mix.json).
bench-mix: build
	$(PY) bench/mix.py --bin $(BUILD)/headrace --json bench/mix.json

# An elastic resume (a state of 4 ranks resumed by 3) against a normal one and a replay,
# timed to the first batch at three positions of the epoch (bench/elastic.json).
bench-elastic: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) bench/elastic.py --data $(DATA) --json bench/elastic.json

# headrace.ray on simulated nodes: throughput vs workers, by reference vs by value through
# the coordinator, spread vs pack, overhead vs the embedded loader (bench/ray.json).
bench-ray: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) bench/ray_streaming.py --json bench/ray.json

# A 1 M-record manifest parsed vs kept as lines (source.records): load time, heap and
# mapped bytes per record, samples/s of a text-only chain (bench/manifest_records.json).
bench-manifest: build
	$(PY) bench/manifest_records.py --json bench/manifest_records.json

# headrace.ray pack vs spread with each simulated node in its own network namespace, the
# CPU nodes' links rate-limited (veth + tc tbf). Needs root and `ip netns` (sudo make
# bench-ray-netns); not part of `make test`. Removes its namespaces and Ray processes
# when done or interrupted (bench/ray_netns.json; numbers into bench/RESULTS.md by hand).
bench-ray-netns:
	@[ "$$(id -u)" = 0 ] || { echo "bench-ray-netns needs root (it creates network namespaces, veth pairs and tc qdiscs): sudo make bench-ray-netns" >&2; exit 1; }
	@ip netns list >/dev/null 2>&1 || { echo "bench-ray-netns: \`ip netns\` is unavailable here (iproute2 missing, or no CAP_SYS_ADMIN)" >&2; exit 1; }
	@$(MAKE) --no-print-directory build $(DATA)/manifest.jsonl
	$(PY) bench/ray_netns.py --json bench/ray_netns.json

# text.tokenize with a HF tokenizer.json: encoding vs the `tokenizers` package on one
# thread, and the VQA pipeline with it vs SentencePiece (bench/tokenize.json; numbers
# into bench/RESULTS.md by hand).
bench-tokenize: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(PY) bench/tokenizers_vs_hf.py --bin $(BUILD)/headrace --data $(DATA) --json bench/tokenize.json

# The real tokenizers of issue 25 (Qwen2/2.5/3, Llama 3, GPT-2 from llama.cpp's copies in
# the llama-cpp-python sdist; scripts/fetch_vocabs.py): 25,000 hard strings each against
# `tokenizers`, the real chat templates and masks against transformers (`make test` runs
# 4,000), then throughput on the same vocabularies (bench/tokenize_real.json).
.PHONY: test-tokenizers
test-tokenizers: build
	$(PY) scripts/fetch_vocabs.py
	HEADRACE_TOKENIZER_SWEEP=25000 HEADRACE_BIN=$(abspath $(BUILD))/headrace $(PY) -m pytest -q tests/python/test_real_tokenizers.py
	$(PY) bench/tokenizers_vs_hf.py --real --json bench/tokenize_real.json

# video.decode and audio.decode vs the ffmpeg command line, one thread (bench/media.json).
bench-media-loaders: build
	$(PY) -m pip install -q -r bench/requirements-media.txt
	$(PY) bench/media_loaders.py --json bench/media_loaders.json

# video.decode and audio.decode against the ffmpeg command line, then video against the
# loaders a careful user writes (PyAV seeking per time, torchcodec; issue 31).
bench-media: build
	$(PY) bench/media.py --bin $(BUILD)/headrace --json bench/media.json
	$(PY) -m pip install -q -r bench/requirements-media.txt
	$(PY) bench/video_loaders.py --json bench/video_loaders.json

# video.decode read: ranges against read: whole from the loopback object server over a
# shaped link (as root, in a network namespace of its own; else unshaped), interleaved
# rounds (bench/video_ranges.json; numbers into bench/RESULTS.md by hand).
.PHONY: bench-video-ranges
bench-video-ranges: build
	$(PY) bench/video_ranges.py --bin $(BUILD)/headrace --json bench/video_ranges.json

# ocr.text vs the tesseract command line, pages/s on one thread (bench/ocr.json).
.PHONY: bench-ocr
bench-ocr: build
	$(PY) bench/ocr.py --bin $(BUILD)/headrace --json bench/ocr.json
bench-pointcloud: build
	$(PY) bench/pointcloud.py --bin $(BUILD)/headrace --json bench/pointcloud.json

clean:
	rm -rf $(BUILD) build-asan build-tsan build-py $(FUZZ_BUILD) out dist build-wheel-* .whl/chroot-*
