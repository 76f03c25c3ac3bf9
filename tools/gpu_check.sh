#!/usr/bin/env bash
# The GPU half of the test suite, for a machine with a CUDA GPU: each notebook (or the ones
# named) runs under `nbdev_test --flags "cuda slow"` in its own process, then `colab-t4 info`.
# Benchmark cells append their figures as JSON lines to $COLAB_T4_BENCH_OUT (default:
# ./bench.jsonl). With COLAB_T4_SAVE_TO=DIR each notebook is copied there alone and run by
# `tools/run_nbs.py --test --save` instead (the same cells nbdev_test runs), keeping its outputs.
# Exit status 1 if any notebook failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export COLAB_T4_BENCH_OUT=${COLAB_T4_BENCH_OUT:-$PWD/bench.jsonl} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,temperature.gpu,power.draw --format=csv
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
fail=0
for nb in "${@:-nbs/*.ipynb}"; do
  for f in $nb; do
    t0=$SECONDS
    if [ -n "${COLAB_T4_SAVE_TO:-}" ]; then
      mkdir -p "$COLAB_T4_SAVE_TO" && cp "$f" "$COLAB_T4_SAVE_TO/"
      if python3 tools/run_nbs.py --test --save "$COLAB_T4_SAVE_TO/$(basename "$f")"; then s=ok; else s=FAILED; fail=1; fi
    elif nbdev_test --path "$f" --flags "cuda slow"; then s=ok; else s=FAILED; fail=1; fi
    echo "$f: $s in $((SECONDS - t0)) s"
  done
done
colab-t4 info || fail=1
exit $fail
