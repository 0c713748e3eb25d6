#!/usr/bin/env bash
# The whole test suite, through CTest; then the same suite under
# AddressSanitizer and UndefinedBehaviorSanitizer (scripts/sanitize.sh), and
# the readers of untrusted input fuzzed for a minute each (scripts/fuzz.sh).
# The run fails when any part failed.
# WS_QUICK=1 runs the first part only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
# Each part runs whatever the one before it gave: a failing test does not
# hide the sanitizers' and the fuzzers' results.
status=0
ctest --test-dir build --output-on-failure -j "$(nproc)" || status=1
if [[ "${WS_QUICK:-0}" != 1 ]]; then
  ./scripts/sanitize.sh || status=1
  ./scripts/fuzz.sh 60 || status=1
fi
exit $status
