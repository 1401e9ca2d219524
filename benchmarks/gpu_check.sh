#!/usr/bin/env bash
# The checks a CUDA machine adds to the CPU suite, in one run that fits a short GPU loan:
#   1. every test that takes the `torch_device` fixture, on "cuda" only (the CPU cases run in CI): each rule's
#      batched kernel decision for decision against the reference rule (tests/test_torch.py), `specproof mc
#      --device cuda` equal to numpy trial for trial (tests/test_montecarlo.py), tree attention, the exact
#      end-to-end law and `specproof real --device cuda` on tiny Llama pairs (tests/test_real.py);
#   2. benchmarks/torch_throughput.py on the GPU.
# Usage: bash benchmarks/gpu_check.sh OUTDIR   (writes pytest_cuda.log, torch_throughput_cuda.md and its log)
set -uo pipefail
out=${1:?usage: gpu_check.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())"
status=0
timeout "${PYTEST_LIMIT:-300}" python3 -m pytest -q -n "${JOBS:-8}" -p no:cacheprovider --tb=short -rs --durations=10 \
    -k cuda tests/test_torch.py tests/test_montecarlo.py tests/test_real.py 2>&1 | tee "$out/pytest_cuda.log" || status=1
# tv-opt and lv-opt solve a max-flow per tree and node on the CPU (2 trees/s): a GPU changes nothing there, and
# their warm-up alone would take a minute, so they are left out
rules=$(python3 -c "from simulator.verifiers.batched.torch_verify import TORCH_VERIFIERS as V; print(','.join(v for v in V if not v.endswith('-opt')))")
timeout "${BENCH_LIMIT:-240}" python3 benchmarks/torch_throughput.py --device cuda --budget "${BUDGET:-0.5}" \
    --verifiers "$rules" --out "$out/torch_throughput_cuda.md" 2> "$out/torch_throughput_cuda.log" || status=1
exit $status
