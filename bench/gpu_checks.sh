#!/usr/bin/env bash
# Every GPU check of the project in one run (issues 38 and 36; about 9 minutes on an H100), for a lent GPU machine
# whose Python lacks some of alternet's dependencies: wheels in .whl/ (pip download ... on a machine with network), the
# reference implementation's models/ in .hdvw/ (a how-do-vits-work checkout's). Each phase has its own time limit,
# so one that hangs leaves the others their time; every log goes to OUT (default outputs/gpu_checks).
#
#     bash bench/gpu_checks.sh [OUT]
set -u -o pipefail
OUT=${1:-${OUT:-outputs/gpu_checks}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NO_ALBUMENTATIONS_UPDATE=1 WANDB_MODE=offline
PYTHON=${PYTHON:-python3}
if [ -d .whl ]; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
phase() {  # phase NAME SECONDS COMMAND...: run with a limit, log to OUT/NAME.log, say how it ended
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  echo "=== $name ($*)"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log" | tail -n 40
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"
}
phase machine 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; nproc;
  $PYTHON -c 'import torch, lightning, timm; print(torch.__version__, torch.version.cuda, lightning.__version__,
  timm.__version__, torch.cuda.get_device_name(), torch.cuda.is_bf16_supported())'"
phase pytest_gpu "${PYTEST_LIMIT:-150}" $PYTHON -m pytest -m gpu -n 0 --dist no -p no:cacheprovider tests/gpu -q -rs --durations=10
REFERENCE=()
[ -d .hdvw/models ] && REFERENCE=(--reference .hdvw)
phase bench_gpu_eager 90 $PYTHON bench/gpu.py "${REFERENCE[@]}" --no-compile --steps 10 --rounds 3 --results-dir "$OUT"
phase bench_gpu_224 "${BENCH_LIMIT:-180}" $PYTHON bench/gpu.py "${REFERENCE[@]}" --sizes 224 --steps 10 --rounds 3 \
  --results-dir "$OUT"
phase profile "${PROFILE_LIMIT:-90}" $PYTHON bench/profile_step.py --device cuda --precision bf16 --channels-last \
  --size 224 --batch 64 --steps 3 "${REFERENCE[@]}" --results-dir "$OUT"
phase hybrids "${HYBRIDS_LIMIT:-90}" $PYTHON bench/hybrids.py --device cuda --precision fp32 bf16 --batch 256 \
  --batch-224 64 --rounds 5 --warmup 2 --results-dir "$OUT"
phase gpu_train "${TRAIN_LIMIT:-150}" $PYTHON bench/gpu_train.py --synthesize --data-root /tmp/cifar --steps 200 \
  --no-compile --workers 8 4 --out /tmp/gpu_train --results-dir "$OUT" -- +trainer.profiler=simple
