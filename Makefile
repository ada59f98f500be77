# Two entry points, each creating .venv on first use:
#   make run   install, then run the main job: the embedded model evaluated on ATAD's hand-written benchmark
#              (scored in code); `make generate` is the generation demo (ATAD with the embedded teacher)
#   make test  install with test extras, then run the whole test suite
#   make lint  ruff (lint and format check) and mypy over the package (CI runs it before the tests)
VENV ?= .venv
PY := $(VENV)/bin/python
# llama.cpp's native CPU flags crash on some CPUs (AMX/AVX-512 paths); a portable build works everywhere.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF
# CPU build of PyTorch for sentence-transformers (override for a GPU build).
TORCH_SPEC ?= torch==2.13.0

.PHONY: run generate test lint install clean-venv

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/dyneval --protocol atad --evaluate local

generate: $(VENV)/.installed
	$(VENV)/bin/dyneval --protocol atad --per-task 1

test: $(VENV)/.installed
	$(PY) -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --python-executable $(PY)

clean-venv:
	rm -rf $(VENV)
