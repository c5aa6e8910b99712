# Set-up and everyday commands. `make train` and `make test` create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export NO_ALBUMENTATIONS_UPDATE := 1

.PHONY: install train test test-all test-lowest lint docs clean

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

# the lowest versions pyproject.toml declares, in a second environment (.venv-lowest), with a smoke subset of the tests
test-lowest:
	bash tools/lowest.sh $(ARGS)

lint: install
	$(BIN)/ruff check .

$(BIN)/.docs-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/python -m pip install -e ".[dev,docs]"
	touch $@

# the documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link or a missing page fails the build
# (NO_MKDOCS_2_WARNING: Material's notice about MkDocs 2.0 and its own end of life, printed on every build)
docs: $(BIN)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf outputs multirun wandb .pytest_cache site
