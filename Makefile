# Set-up and everyday commands. `make train` and `make test` create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export NO_ALBUMENTATIONS_UPDATE := 1

.PHONY: install train test test-all lint clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	# torch comes first, pinned, so pip takes the build on this machine's disk (see README)
	$(BIN)/python -m pip install torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

install: $(BIN)/.installed

train: install
	$(BIN)/python train.py $(ARGS)

test: install
	$(BIN)/python -m pytest $(ARGS)

test-all: install
	$(BIN)/python -m pytest -m "" $(ARGS)

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf outputs multirun wandb .pytest_cache
