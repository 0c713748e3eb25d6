#!/usr/bin/env bash
# Fuzzes the readers of untrusted input (IDX files, text, safetensors, IR
# text) with libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer,
# each for SECONDS (default 60) from the seed corpus in fuzz/corpus/<target>,
# as many at once as there are cores.
# A crash fails the run and leaves its input in build-fuzz/crashes/.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-60}
# clang is only for fuzzing; its OpenMP runtime only links (the fuzzed readers run no parallel
# code).
./scripts/install_packages.sh clang-16 libclang-rt-16-dev libomp-16-dev

flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -g1"
# -O1, as libFuzzer's own builds: half the compile time of -O3. Only the
# readers' layers are compiled (fuzz/CMakeLists.txt).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DWS_OPTIMIZE=-O1 \
  -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_CXX_FLAGS="$flags" \
  -DWS_FUZZ=ON -DWS_BUILD_TESTS=OFF -DWS_BUILD_BENCHMARKS=OFF -DWS_PYTHON=OFF >/dev/null
targets=(idx_fuzz text_fuzz safetensors_fuzz ir_parser_fuzz)
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build-fuzz/crashes
# One fuzzer a core at a time: each is a single process.
fuzz() {
  local t=$1 corpus=build-fuzz/corpus/$1
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"${t%_fuzz}"/* "$corpus"/ 2>/dev/null || true
  build-fuzz/fuzz/$t "$corpus" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix=build-fuzz/crashes/"$t"- -print_final_stats=1 \
    2>build-fuzz/$t.log
}
status=0
jobs=$(nproc)
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    echo "fuzzing $t for ${seconds}s"
    fuzz "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    t=${batch[k]}
    if ! wait "${pids[k]}"; then
      echo "$t failed:"
      tail -40 build-fuzz/$t.log
      status=1
    else
      echo "$t:"
      grep -E "stat::number_of_executed_units|stat::new_units_added" build-fuzz/$t.log || true
    fi
  done
done
exit $status
