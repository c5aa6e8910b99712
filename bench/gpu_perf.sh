#!/usr/bin/env bash
# The one prepared GPU run (issues 49 and 50): what a lent GPU machine measures, most valuable first, each phase under
# its own time limit and all of them under one deadline (BUDGET seconds, default 480), so a phase that hangs or a
# slow start leaves the others their time and the whole run fits a 15-minute lease with room to run it again.
# Every log and results CSV goes to OUT (default outputs/gpu_perf); a summary of each phase's end goes to stdout.
#
#     bash bench/gpu_perf.sh [--device cpu] [OUT]
#
# Through the device tool, which returns at most 8 files, pack OUT: `bash bench/gpu_perf.sh /tmp/gp; tar czf
# $OUT/gpu_perf.tgz -C /tmp gp` (carry .whl and .hdvw).
#
# Phases, most valuable first (what a short lease must not miss): the machine; the real run
# (python -m bench.gpu_train: experiment=alternet_r50_cifar100 on 50,000 synthesized CIFAR-100 images, whole epochs, 4
# workers) with CUDA graphs (reduce-overhead, as performance.compile=auto trains on one GPU), the whole step compiled
# and the backbone alone, in one run; pytest -m gpu; the ImageNet feed (AlterNet-50 at 224 px with the paper's ImageNet
# recipe on 12,800 synthesized JPEGs, eager, every core but one loading, data.decode exact and fast, and
# data.loader=dali where DALI is installed: img/s and the loader's share); the bare step at 224 px
# batch 256 compiled, beside the reference; where the host's time goes in the 32 px batch-96 step with CUDA graphs;
# the real run with data.num_workers=auto (its workers grow while the step waits; the log says when); the real run
# eager; the bare step eager at batches 96/256/1024 (32 px) and 256 (224 px) in both memory formats, with the host's
# enqueue time; a profile of the 32 px batch-96 step; the bare step at 32 px batch 512 compiled, beside the
# reference; two concurrent runs on one GPU.
# A machine whose Python lacks some of alternet's dependencies takes wheels from .whl/ (pip download ... on a
# machine with network: docs/development.md); the reference implementation's models/ come from .hdvw/ (a
# how-do-vits-work checkout's). --device cpu runs every phase at tiny sizes on a CPU: the slow suite's smoke test.
set -u -o pipefail
DEVICE=cuda
if [ "${1:-}" = "--device" ]; then DEVICE=$2; shift 2; fi
OUT=${1:-${OUT:-outputs/gpu_perf}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NO_ALBUMENTATIONS_UPDATE=1 WANDB_MODE=offline
PYTHON=${PYTHON:-python3}
DEADLINE=$((SECONDS + ${BUDGET:-480}))
if [ -d .whl ] && ! $PYTHON -c "import hydra, wandb, litdata, albumentations, alternet" 2>/dev/null; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
phase() {  # phase NAME SECONDS COMMAND...: run within min(SECONDS, time left), log to OUT/NAME.log, say how it ended
  local name=$1 limit=$2 start=$SECONDS left=$((DEADLINE - SECONDS))
  shift 2
  if [ "$left" -lt 20 ]; then echo "=== $name: skipped (the budget is spent)"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit} s): $*"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local status=$?
  grep -v -e '^wandb:' -e '^\s*$' "$OUT/$name.log" | tail -n 25
  echo "=== $name: exit $status after $((SECONDS - start)) s"
}
REFERENCE=()
[ -d .hdvw/models ] && REFERENCE=(--reference .hdvw)
DATA=/tmp/gpu_perf_cifar              # synthesized once, shared by the phases
RUNS=$(mktemp -d /tmp/gpu_perf_runs.XXXXXX)  # the runs' directories (checkpoints stay out of OUT, which comes back)
if [ "$DEVICE" = cuda ]; then
  IMAGES=50000 EPOCHS=3 B32=(96 256 1024) B224=(256) GOAL32=512 GOAL224=256 STEPS=10 PROFILE=(--model alternet_r50)
  COMPILE=(--compile-mode reduce-overhead) SIZES=(--sizes 32 224) SIZES_224=(--sizes 224) ROUNDS=3
  PROFILE_COMPILE=(--compile-mode reduce-overhead)
  TRAIN_ARGS=()
else  # a smoke test: tiny sizes, the laptop model, fp32 on the CPU
  IMAGES=1024 EPOCHS=2 B32=(2) B224=(2) GOAL32=2 GOAL224=2 STEPS=1 PROFILE=(--model alternet_tiny)
  COMPILE=(--no-compile)  # compiling AlterNet-50 takes a CPU minutes (the training phase compiles the tiny model)
  PROFILE_COMPILE=()
  SIZES=(--sizes 32) SIZES_224=(--sizes 32) ROUNDS=1  # AlterNet-50 at 224 px takes a CPU a minute a step
  TRAIN_ARGS=(-- model=alternet_tiny trainer=cpu trainer.precision=32-true recipe.batch_size=16 data.val_size=32
    data.train_clean_size=32 recipe.eval_batch_size=64)
  REFERENCE=()
fi
JPEGS=12800 FEED_WORKERS=$(( $(nproc) - 1 )) FEED_ARGS=()  # the ImageNet feed: 300 steps of 128 at 224 px
# data.loader=dali beside them where DALI is installed (the alternet[dali] extra: its ~350 MB of wheels do not fit the
# device tool's 64 MiB carry, so a lent machine runs it only if it has DALI already)
DALI_FEED=""
$PYTHON -c "import nvidia.dali" 2>/dev/null && DALI_FEED=dali
if [ "$DEVICE" = cpu ]; then
  JPEGS=200 FEED_WORKERS=1 FEED_ARGS=(-- model=alternet_tiny trainer=cpu data.image_size=32 recipe.batch_size=16
    trainer.precision=32-true recipe.eval_batch_size=32)
fi
TRAIN=(-m bench.gpu_train --synthesize --data-root "$DATA" --images "$IMAGES" --epochs "$EPOCHS" --results-dir "$OUT")
PRECISION=bf16
[ "$DEVICE" = cpu ] && PRECISION=fp32

phase machine 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1;
  nproc; $PYTHON -c 'import torch, lightning, timm; print(torch.__version__, torch.version.cuda, lightning.__version__,
  timm.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else \"no GPU\",
  torch.cuda.is_available() and torch.cuda.is_bf16_supported(), torch.get_num_threads())';
  $PYTHON -c 'import nvidia.dali as d; print(\"DALI\", d.__version__)' 2>/dev/null || echo 'no DALI'"
phase train_graphs "${COMPILED_LIMIT:-330}" $PYTHON "${TRAIN[@]}" --workers 4 \
  --modes reduce-overhead backbone-reduce-overhead --out $RUNS/graphs "${TRAIN_ARGS[@]}"
phase pytest_gpu "${PYTEST_LIMIT:-170}" $PYTHON -m pytest -m gpu -n 0 --dist no -p no:cacheprovider tests/gpu -q -rs \
  --durations=10
phase imagenet_feed "${IMAGENET_LIMIT:-200}" $PYTHON -m bench.gpu_train --imagenet "$JPEGS" --data-root /tmp/gpu_perf_jpegs \
  --epochs 3 --workers "$FEED_WORKERS" --modes eager --feeds exact fast $DALI_FEED --results-dir "$OUT" --out $RUNS/imagenet \
  "${FEED_ARGS[@]}"
phase step_goals_224 "${GOALS_LIMIT:-180}" $PYTHON -m bench.gpu --device "$DEVICE" "${REFERENCE[@]}" "${COMPILE[@]}" \
  "${SIZES_224[@]}" --batch32 "$GOAL32" --batch224 "$GOAL224" --steps "$STEPS" --rounds "$ROUNDS" \
  --results-dir "$OUT"
phase profile_graphs 120 $PYTHON -m bench.profile_step --device "$DEVICE" --precision "$PRECISION" --channels-last \
  --size 32 --batch "${B32[0]}" --steps 3 "${PROFILE[@]}" "${PROFILE_COMPILE[@]}" --results-dir "$OUT"
phase train_auto "${TRAIN_LIMIT:-150}" $PYTHON "${TRAIN[@]}" --workers auto --modes reduce-overhead --out $RUNS/auto \
  "${TRAIN_ARGS[@]}"
phase train_eager "${TRAIN_LIMIT:-150}" $PYTHON "${TRAIN[@]}" --workers 4 --modes eager --out $RUNS/eager \
  "${TRAIN_ARGS[@]}"
phase step_formats "${FORMATS_LIMIT:-120}" $PYTHON -m bench.gpu --device "$DEVICE" --no-compile \
  "${SIZES[@]}" --batch32 "${B32[@]}" --batch224 "${B224[@]}" --formats channels_last contiguous \
  --steps "$STEPS" --rounds "$ROUNDS" --results-dir "$OUT"
phase profile_32 60 $PYTHON -m bench.profile_step --device "$DEVICE" --precision "$PRECISION" --channels-last \
  --size 32 --batch "${B32[0]}" --steps 3 "${PROFILE[@]}" --results-dir "$OUT"
phase step_goals_32 "${GOALS_LIMIT:-150}" $PYTHON -m bench.gpu --device "$DEVICE" "${REFERENCE[@]}" "${COMPILE[@]}" \
  --sizes 32 --batch32 "$GOAL32" --steps "$STEPS" --rounds "$ROUNDS" --results-dir "$OUT"
phase concurrent "${CONCURRENT_LIMIT:-150}" bash -c "  # their aggregate: the sum of the two steady rates
  $PYTHON ${TRAIN[*]} --workers 4 --modes reduce-overhead --tag concurrent-1 --out $RUNS/c1 ${TRAIN_ARGS[*]} & first=\$!
  $PYTHON ${TRAIN[*]} --workers 4 --modes reduce-overhead --tag concurrent-2 --out $RUNS/c2 ${TRAIN_ARGS[*]} & second=\$!
  wait \$first; a=\$?; wait \$second; exit \$((a | \$?))"
rm -rf "$RUNS"
echo "=== done in $SECONDS s; logs and results in $OUT"
