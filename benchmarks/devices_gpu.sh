#!/usr/bin/env bash
# On a machine with a CUDA GPU, from the repository root: the cuda-marked tests, then the device benchmark
# (every row on cpu and cuda, eager and compiled, with SB3's PPO on Breakout for the ratios), then PPO on
# Breakout with its envs in 8 worker processes against SB3's SubprocVecEnv (the env steps bound the one-process
# rows on a GPU: docs/devices.md).
#   bash benchmarks/devices_gpu.sh            # PYTHON=/path/to/python to pick an interpreter
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: torch.cuda.is_available() is False')"
"$PYTHON" -m pytest -q -m cuda tests/test_devices.py
"$PYTHON" benchmarks/devices.py --compile on --sb3 "$@"
"$PYTHON" benchmarks/devices.py --compile off --sb3 --workers 8 --rows ppo-breakout --steps 8192
