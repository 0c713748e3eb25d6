#!/usr/bin/env bash
# Same-run comparison of wholestep against PyTorch eager on the reference
# models (benchmarks/pytorch_compare.py): installs Debian's python3-torch (and
# OpenBLAS for it) if missing, builds wholestep in build/ (scripts/setup.sh),
# then runs the comparison with Debian's python3, passing every argument on:
#   ./benchmarks/compare_pytorch.sh --models mlp,cnn --rounds 5
#   ./benchmarks/compare_pytorch.sh --check
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# PyTorch's BLAS: with --no-install-recommends apt would satisfy libtorch's
# libblas.so.3 with the reference BLAS; a plain `apt-get install python3-torch`
# brings OpenBLAS (a recommended package), so install that explicitly.
./scripts/install_packages.sh python3-torch libopenblas0
./scripts/setup.sh
exec /usr/bin/python3 benchmarks/pytorch_compare.py "$@"
