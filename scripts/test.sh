#!/usr/bin/env bash
# The whole test suite, through CTest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
