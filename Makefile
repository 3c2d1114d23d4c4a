# The two commands a newcomer types: `make run` and `make test`. See README.md.
BUILD    ?= build
JOBS     ?= $(shell nproc)
SAMPLES  ?= 1000
DATA     := data/sample
CMAKE_FLAGS ?=

.PHONY: all setup build run test unit e2e asan tsan bench clean

all: build

setup:
	@scripts/setup.sh

# Configure once, then let ninja decide what to rebuild.
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

$(DATA)/manifest.jsonl:
	$(BUILD)/headrace make-sample --out $(DATA) --samples $(SAMPLES)

# The main job: the example pipeline on the sample dataset, against a simulated trainer.
run: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(BUILD)/headrace run examples/vqa.yaml --report out/run-report.json
	@echo "report: out/run-report.json"

# Every test: unit tests, end-to-end tests, then the suite under ASan/UBSan and the
# executor's tests under TSan.
test: build
	@$(MAKE) --no-print-directory unit e2e asan tsan

unit:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

e2e:
	HEADRACE_BIN=$(abspath $(BUILD))/headrace .venv/bin/python -m pytest -q tests

asan: setup
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEADRACE_SANITIZE=address
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

tsan: setup
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHEADRACE_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS) --target hr_exec_test hr_io_test
	TSAN_OPTIONS=halt_on_error=1 build-tsan/src/headrace/exec/hr_exec_test
	TSAN_OPTIONS=halt_on_error=1 build-tsan/src/headrace/io/hr_io_test

# Benchmarks: results go into bench/RESULTS.md by hand, with command, machine and date.
bench: build
	@$(MAKE) --no-print-directory $(DATA)/manifest.jsonl
	$(BUILD)/headrace bench engine examples/vqa.yaml --samples 400 --report bench/engine.json

clean:
	rm -rf $(BUILD) build-asan build-tsan out
