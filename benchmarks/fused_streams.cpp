// How fast one core reads and writes several large arrays at once: the
// measurement behind the fuse pass's bound on streams (lower/
// fuse_elementwise.cpp). Each case reads `in` arrays and writes `out` arrays
// of 6.4 MB (a [64, 32, 28, 28] f32 activation) in chunks of 2048 elements,
// as a fused loop does, against the same bytes moved one array pair at a
// time, as single-op kernels do. Reports GB/s, writes counted twice (a
// written line is read first). The prefetching variant first asks for every
// array's chunk after next: on the developer machine it gained or lost from
// run to run with no consistent sign, and whole gpt and cnn steps with and
// without it in the fused loops were within noise (6.6-6.9 and 12.3-12.7
// ms), so the fused loop kernel does not prefetch.
//   build/benchmarks/fused_streams
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kElems = size_t(64) * 32 * 28 * 28;
constexpr size_t kChunk = 2048;

struct Arrays {
  std::vector<float*> in, out;
  Arrays(int nin, int nout) {
    for (int i = 0; i < nin; ++i) in.push_back(alloc(1.0f + float(i)));
    for (int i = 0; i < nout; ++i) out.push_back(alloc(0.0f));
  }
  ~Arrays() {
    for (float* p : in) std::free(p);
    for (float* p : out) std::free(p);
  }
  static float* alloc(float v) {
    auto* p = static_cast<float*>(std::aligned_alloc(4096, kElems * sizeof(float)));
    for (size_t i = 0; i < kElems; ++i) p[i] = v;
    return p;
  }
};

void report(benchmark::State& state, int nin, int nout) {
  state.counters["GB/s"] = benchmark::Counter(
      double(state.iterations()) * double(kElems * sizeof(float) * size_t(nin + 2 * nout)),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// A fused loop: every chunk reads all inputs and writes all outputs; with
// `prefetch`, it first asks for the chunk after next of every array (which
// the fused loop kernel does not do: see the top).
void interleaved(benchmark::State& state, bool prefetch) {
  const int nin = int(state.range(0)), nout = int(state.range(1));
  Arrays a(nin, nout);
  alignas(64) static float buf[kChunk];
  for (auto _ : state) {
    for (size_t s = 0; s < kElems; s += kChunk) {
      const size_t len = std::min(kChunk, kElems - s);
      if (prefetch && s + 3 * kChunk <= kElems) {
        for (float* p : a.in)
          for (size_t b = 0; b < kChunk; b += 16) __builtin_prefetch(p + s + 2 * kChunk + b, 0, 3);
        for (float* p : a.out)
          for (size_t b = 0; b < kChunk; b += 16) __builtin_prefetch(p + s + 2 * kChunk + b, 1, 3);
      }
      std::memcpy(buf, a.in[0] + s, len * sizeof(float));
      for (int k = 1; k < nin; ++k)
        for (size_t j = 0; j < len; ++j) buf[j] += a.in[size_t(k)][s + j];
      for (int k = 0; k < nout; ++k)
        for (size_t j = 0; j < len; ++j) a.out[size_t(k)][s + j] = buf[j] * float(k + 1);
    }
    benchmark::DoNotOptimize(a.out[0][kElems / 2]);
  }
  report(state, nin, nout);
}

void BM_Interleaved(benchmark::State& state) { interleaved(state, false); }
void BM_InterleavedPrefetch(benchmark::State& state) { interleaved(state, true); }

// Single-op kernels: the same arrays, one read and one write stream at a
// time.
void BM_OnePairAtATime(benchmark::State& state) {
  const int nin = int(state.range(0)), nout = int(state.range(1));
  Arrays a(nin, nout);
  for (auto _ : state) {
    for (int k = 0; k < std::max(nin, nout); ++k) {
      const float* x = a.in[size_t(k % nin)];
      float* y = a.out[size_t(k % nout)];
      for (size_t j = 0; j < kElems; ++j) y[j] = x[j] * 2.0f;
    }
    benchmark::DoNotOptimize(a.out[0][kElems / 2]);
  }
  report(state, std::max(nin, nout), std::max(nin, nout));
}

BENCHMARK(BM_Interleaved)
    ->ArgsProduct({{1, 2, 4, 8}, {1, 2, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_InterleavedPrefetch)
    ->ArgsProduct({{1, 4, 8}, {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_OnePairAtATime)
    ->ArgsProduct({{1, 4, 8}, {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
