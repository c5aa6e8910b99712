#!/usr/bin/env bash
# The lowest versions pyproject.toml declares, tested: a second virtual environment (.venv-lowest) with every direct
# dependency at the lowest version its bound allows (uv's --resolution lowest-direct; what the other dependencies'
# own bounds let through), then a smoke subset of the test suite in it. `make test-lowest` runs this; CI too.
#
# torch and torchvision are the exception: they stay at the README's build (its wheels lie on the machines this
# project tests on, and the bound in pyproject.toml is that build's), so what this checks is every other floor
# against them.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-lowest
export NO_ALBUMENTATIONS_UPDATE=1

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
PINNED=(torch==2.14.1 torchvision==0.29.1)  # the README's build
"$VENV/bin/python" -m pip install -q "${PINNED[@]}" uv
printf '%s\n' "${PINNED[@]}" > "$VENV/pinned.txt"
"$VENV/bin/uv" pip compile -q pyproject.toml --extra dev --resolution lowest-direct --constraint "$VENV/pinned.txt" \
    --python "$VENV/bin/python" --output-file "$VENV/lowest.txt"
# the dependencies as resolved, the package itself without them (they are all in the list)
grep -v -E '^(torch|torchvision|nvidia-|cuda-|triton)[=-]' "$VENV/lowest.txt" > "$VENV/install.txt"
"$VENV/bin/python" -m pip install -q -r "$VENV/install.txt"
"$VENV/bin/python" -m pip install -q --no-deps -e .
echo "lowest declared versions:"
grep -E "^($(sed -n '/^dependencies = \[/,/^\]/p' pyproject.toml | grep -o '^    "[A-Za-z0-9_.-]*' \
    | tr -d ' "' | tr '_' '-' | paste -sd '|'))==" "$VENV/lowest.txt" | sed 's/^/  /'
# a smoke subset: every command end to end, the models (built on the meta device too), data and RandAugment against
# timm's, evaluation, the report, the hub, W&B, and the tests that found a floor that was not true
"$VENV/bin/python" -m pytest -q -p no:randomly \
    tests/apps/test_commands.py tests/models/test_models.py tests/models/test_model_configs.py \
    tests/models/test_local_attention.py tests/data/test_data.py tests/data/test_randaugment.py tests/evaluation \
    tests/metrics tests/report/test_verdicts.py tests/hub/test_hub.py tests/hub/test_hub_card.py tests/test_wandb.py \
    tests/helpers/test_warm.py tests/apps/test_extensions.py tests/test_lazy.py "$@"
