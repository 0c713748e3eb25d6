#!/usr/bin/env bash
# The main job: train the reference CNN on Fashion-MNIST (2 epochs, then test
# accuracy) and the byte-level GPT on a text file (300 steps, then held-out
# loss), each as one compiled step, then compare the execution modes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
./build/wholestep train --model cnn --epochs 2 "$@"
./build/wholestep train --model gpt --steps 300
./build/wholestep compare --model gpt --steps 20 --warmup 2 --no-alias-rows
./build/wholestep compare --model cnn --steps 8 --warmup 2
./build/wholestep compare --model mlp --steps 30 --warmup 3
