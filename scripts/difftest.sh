#!/usr/bin/env bash
# The differential testers for SECONDS each (default 3600), one after the
# other: the compiler's (build/tests/difftest: random training steps compiled
# every way against the interpreter and float64) and the PyTorch frontend's
# (tests/python/torch_fuzz.py: random torch modules through wholestep.torch
# against eager torch in float64). Each prints its seed and a summary; a
# failure is shrunk and written to build/difftest-failures/ (a .spec, and a
# step graph .in.ir for tests/lower/fuse/) or build/torch-fuzz-failures/
# (a JSON spec for tests/python/fuzz_regressions/). CTest runs both for about
# two minutes (WS_DIFFTEST_SECONDS, WS_TORCH_FUZZ_SECONDS).
# Usage: scripts/difftest.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-3600}
./scripts/setup.sh difftest wholestep_python
status=0
build/tests/difftest --seconds "$seconds" --save build/difftest-failures || status=1
PYTHONPATH=build/python /usr/bin/python3 tests/python/torch_fuzz.py --seconds "$seconds" \
  --out build/torch-fuzz-failures || status=1
exit $status
