#!/usr/bin/env bash
# The main job: train the reference MLP on Fashion-MNIST for one epoch as one
# compiled step, report test accuracy, then compare the execution modes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
./build/wholestep train --model mlp --epochs 1 --mode single_graph "$@"
./build/wholestep compare --model mlp --steps 30 --warmup 3 --no-alias-rows
