#!/usr/bin/env bash
# Installs what wholestep needs on Debian 12 (only the missing packages) and
# builds it in build/ (Release): the targets named as arguments, or all of
# them. Run by main.sh (the command line alone) and test.sh; safe to rerun.
# libopenblas0-openmp: without an optimized BLAS, Debian's torch runs its
# products on the reference BLAS, and the tests' float64 eager torch runs
# take several times longer. python3-networkx: the min-cut partitioner of
# AOTAutograd (functorch.compile), a peer in benchmarks/torchvision_compare.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(g++ cmake ninja-build libfmt-dev zlib1g-dev libgtest-dev libbenchmark-dev
          libcli11-dev libdnnl-dev libxbyak-dev libeigen3-dev nlohmann-json3-dev libboost-graph-dev
          dataset-fashion-mnist graphviz python3-matplotlib
          pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-torch
          python3-torchvision libopenblas0-openmp python3-networkx openmpi-bin libopenmpi-dev)
./scripts/install_packages.sh "${packages[@]}"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if (($# > 0)); then
  cmake --build build -j "$(nproc)" --target "$@"
else
  cmake --build build -j "$(nproc)"
fi
