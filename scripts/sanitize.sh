#!/usr/bin/env bash
# The test suite built with AddressSanitizer and UndefinedBehaviorSanitizer
# (in build-sanitize/: the library and the command line instrumented, the
# test programs' own code plain and linked with the sanitizer runtimes; not
# the Python package, which a python3 without the sanitizer runtimes cannot
# load), run through CTest. Any report fails the run. Sourced after setup.sh by test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1"
# -O1: the instrumented build compiles in about half the time of -O3 (its
# largest files: 42 s against 88 s) and its checks are the same.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Release -DWS_OPTIMIZE=-O1 \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DWS_BUILD_BENCHMARKS=OFF -DWS_PYTHON=OFF -DWS_TEST_FLAGS=-fno-sanitize=all >/dev/null
# The test programs and the programs they run (the command line, and the
# tutorial's example for tests/docs); not the benchmarks or other examples.
targets=$(ninja -C build-sanitize -t targets all | sed -n 's/^\(tests\/[a-z_]*_tests\): .*/\1/p;
  s/^\(tests\/difftest\): .*/\1/p; s/^\(wholestep\): .*/\1/p' | sort -u)
cmake --build build-sanitize -j "$(nproc)" --target $targets
# oneDNN and OpenMP keep process-wide caches until exit: leak reports would
# be theirs, not ours.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The differential tester explores for a minute here (its cases run slower).
export WS_DIFFTEST_SECONDS=${WS_DIFFTEST_SECONDS:-60}
ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)"
