#!/bin/bash
# On the GPU machine: install the carried wheels (perfbot runs from this working tree), measure the bf16 matmul
# limit, then bench the seed repository prepared here at --size gpu and carried as .whl/seed_repo.tar.gz
# (`prepare.sh MIRROR gpu /tmp/seed-gpu && tar -czf .whl/seed_repo.tar.gz -C /tmp seed-gpu`).
# Usage: WORKLOADS=train|train-2 bash experiments/seed_bench/gpu.sh [bot bench options]   (results in $OUT)
set -u
# shellcheck source=experiments/device_env.sh
source experiments/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 - <<'PY'
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(5): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(50): a @ b
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 50
print(f"bf16 matmul 8192^3: {2 * 8192**3 / dt / 1e12:.0f} TFLOP/s")
PY
python3 -c "import torch, transformers, trl, peft; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__)"
mkdir -p /tmp/seed && tar -xzf .whl/seed_repo.tar.gz -C /tmp/seed
experiments/seed_bench/measure.sh /tmp/seed/seed-gpu "${OUT:-/tmp/seed-out}/seed-${WORKLOADS:-all}" "$@"
