// The matrix products of the mlp step (forward, input and weight gradients)
// through oneDNN, the backend wholestep uses, and through OpenBLAS's
// cblas_sgemm, alternating shape by shape in one run; median of many runs.
// Built only where OpenBLAS is installed. OpenBLAS chooses its kernels by CPU
// model (OPENBLAS_CORETYPE overrides it), oneDNN by instruction-set flags:
//   build/benchmarks/gemm_backends [threads]
//   OPENBLAS_CORETYPE=Prescott build/benchmarks/gemm_backends   # OpenBLAS's generic core
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "timing.hpp"

extern "C" char* openblas_get_corename();
extern "C" void openblas_set_num_threads(int);

namespace {

using ws::bench::median;
using ws::bench::now_ms;

struct Shape {
  int m, k, n;
  bool ta, tb;
  const char* what;
};

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_num_procs();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const Shape shapes[] = {
      {128, 784, 512, false, true, "fc1 forward"}, {128, 512, 512, false, true, "fc2 forward"},
      {128, 512, 10, false, true, "fc3 forward"},  {10, 128, 512, true, false, "fc3 dW"},
      {128, 10, 512, false, false, "fc3 dX"},      {512, 128, 512, true, false, "fc2 dW"},
      {128, 512, 512, false, false, "fc2 dX"},     {512, 128, 784, true, false, "fc1 dW"},
  };
  std::printf("threads %d; OpenBLAS core %s\n", threads, openblas_get_corename());
  std::printf("%-12s %-16s %10s %8s %10s %8s  %s\n", "product", "m x k x n", "oneDNN ms", "GF/s",
              "OpenBLAS", "GF/s", "oneDNN implementation");
  double total[2] = {0, 0};
  for (const Shape& s : shapes) {
    using dims = dnnl::memory::dims;
    const auto f32 = dnnl::memory::data_type::f32;
    std::vector<float> a(size_t(s.m) * s.k, 0.5f), b(size_t(s.k) * s.n, 0.25f),
        c(size_t(s.m) * s.n);
    dnnl::memory::desc ad({s.m, s.k}, f32, s.ta ? dims{1, s.m} : dims{s.k, 1});
    dnnl::memory::desc bd({s.k, s.n}, f32, s.tb ? dims{1, s.k} : dims{s.n, 1});
    dnnl::memory::desc cd({s.m, s.n}, f32, dims{s.n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), eng);
    dnnl::matmul mm(pd);
    dnnl::memory am(ad, eng, a.data()), bm(bd, eng, b.data()), cm(cd, eng, c.data());
    std::vector<double> t_dnnl, t_blas;
    for (int r = 0; r < 300; ++r) {  // alternating, so noise falls on both alike
      double t0 = now_ms();
      mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      strm.wait();
      t_dnnl.push_back(now_ms() - t0);
      t0 = now_ms();
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  s.m, s.n, s.k, 1.0f, a.data(), s.ta ? s.m : s.k, b.data(), s.tb ? s.k : s.n, 0.0f,
                  c.data(), s.n);
      t_blas.push_back(now_ms() - t0);
    }
    const double d = median(t_dnnl), o = median(t_blas), gf = 2.0 * s.m * s.n * s.k * 1e-6;
    total[0] += d, total[1] += o;
    char dims_str[64];
    std::snprintf(dims_str, sizeof dims_str, "%dx%dx%d%s%s", s.m, s.k, s.n, s.ta ? " ta" : "",
                  s.tb ? " tb" : "");
    std::printf("%-12s %-16s %10.3f %8.0f %10.3f %8.0f  %s\n", s.what, dims_str, d, gf / d, o,
                gf / o, pd.impl_info_str());
  }
  std::printf("%-29s %10.3f %8s %10.3f  (OpenBLAS / oneDNN = %.2f)\n", "all eight", total[0], "",
              total[1], total[1] / total[0]);
  return 0;
}
