#!/usr/bin/env bash
# The whole test suite, through CTest; then the same suite under
# AddressSanitizer and UndefinedBehaviorSanitizer (scripts/sanitize.sh), and
# the readers of untrusted input fuzzed for a minute each (scripts/fuzz.sh).
# WS_QUICK=1 runs the first part only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [[ "${WS_QUICK:-0}" != 1 ]]; then
  ./scripts/sanitize.sh
  ./scripts/fuzz.sh 60
fi
