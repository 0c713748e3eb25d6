// The float64 products and convolutions (f64_products.hpp): products equal
// one fma chain a element, bit for bit, at every blocking edge; convolutions
// match the direct loops and the adjoint identity; every result is the same
// bits on any number of threads.
#include "exec/f64_products.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "exec/conv_cases.hpp"
#include "exec/threads.hpp"

namespace ws::exec {
namespace {

// The definition: c(i, j) = an fma chain from zero over each 256-long
// slice of q in order, the slices' sums added in order to the first slice's
// (or to c's old value).
Vec fma_chain_product(int64_t m, int64_t n, int64_t k, const Vec& a, bool ta, const Vec& b, bool tb,
                      const Vec& c0, bool accumulate) {
  constexpr int64_t kSlice = 256;
  Vec c(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? c0[size_t(i * n + j)] : 0.0;
      for (int64_t q0 = 0; q0 < k; q0 += kSlice) {
        double t = 0.0;
        for (int64_t q = q0; q < std::min(k, q0 + kSlice); ++q)
          t = std::fma(a[size_t(ta ? q * m + i : i * k + q)], b[size_t(tb ? j * k + q : q * n + j)],
                       t);
        s = accumulate || q0 > 0 ? s + t : t;
      }
      c[size_t(i * n + j)] = s;
    }
  return c;
}

// Runs `f` on 1, 2 and 3 threads and on a one-thread team of 2; returns the
// four results.
template <class F>
std::vector<Vec> on_every_team(F&& f) {
  const int before = num_threads();
  std::vector<Vec> out;
  for (auto [threads, team] : {std::pair{1, 0}, {2, 0}, {3, 0}, {2, 1}}) {
    set_num_threads(threads);
    std::optional<TeamScope> scope;
    if (team > 0) scope.emplace(team);
    out.push_back(f());
  }
  set_num_threads(before);
  return out;
}

// Shapes at and across every blocking edge: the 6 x 8 register block, the
// 120 x 256 tile and the 256-long slices of k; a single row, column or term.
TEST(GemmF64, EqualsFmaChainsOverSlicesOfKAddedInOrderAtEveryBlockingEdge) {
  struct Case {
    int64_t m, n, k;
  };
  const Case cases[] = {{1, 1, 1},       {6, 8, 256},   {7, 9, 257},   {5, 7, 3},
                        {121, 257, 513}, {120, 256, 1}, {1, 300, 40},  {300, 1, 40},
                        {13, 17, 0},     {64, 600, 70}, {250, 30, 600}};
  std::mt19937 rng(3);
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(fmt::format("m={} n={} k={} ta={} tb={} accumulate={}", c.m, c.n, c.k, ta,
                                   tb, accumulate));
          const Vec a = random_vec(c.m * c.k, rng), b = random_vec(c.k * c.n, rng);
          const Vec c0 = random_vec(c.m * c.n, rng);
          const Vec want = fma_chain_product(c.m, c.n, c.k, a, ta, b, tb, c0, accumulate);
          for (const Vec& got : on_every_team([&] {
                 Vec y = c0;
                 gemm_f64(c.m, c.n, c.k, {a.data(), ta ? 1 : c.k, ta ? c.m : 1},
                          {b.data(), tb ? 1 : c.n, tb ? c.k : 1}, y.data(), c.n, accumulate);
                 return y;
               }))
            ASSERT_EQ(got, want);
        }
}

// A long sum of equal terms, where one chain's error grows with every
// term: by slices of 256 it stays within (256 + k/256) roundings of the
// exact value (one chain over 65536 terms of 0.1 is 17 times that bound
// away; float64 torch's products are as near as the slices).
TEST(GemmF64, ALongSumStaysWithinTheRoundingsOfItsSlices) {
  const int64_t k = 65536;
  const Vec a(size_t(k), 0.1), b(size_t(k), 1.0);
  double c = 0.0;
  gemm_f64(1, 1, k, {a.data(), k, 1}, {b.data(), 1, 1}, &c, 1, false);
  const long double exact = static_cast<long double>(0.1) * k;
  const double bound = double(256 + k / 256) * 0x1p-53 * double(exact);
  EXPECT_LE(double(std::fabs(static_cast<long double>(c) - exact)), bound) << c;
}

// A row stride wider than the row (a block of a larger matrix): the
// elements between the rows stay as they were.
TEST(GemmF64, WritesOnlyItsBlockOfAWiderOutput) {
  std::mt19937 rng(4);
  const int64_t m = 9, n = 11, k = 5, ldc = 20;
  const Vec a = random_vec(m * k, rng), b = random_vec(k * n, rng);
  Vec c(size_t(m * ldc), 7.0);
  gemm_f64(m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c.data(), ldc, false);
  const Vec want = fma_chain_product(m, n, k, a, false, b, false, Vec(size_t(m * n)), false);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j)
      ASSERT_EQ(c[size_t(i * ldc + j)], j < n ? want[size_t(i * n + j)] : 7.0)
          << "row " << i << " column " << j;
}

TEST(MatmulF64, BatchedProductsEqualEachProductAlone) {
  std::mt19937 rng(5);
  const int64_t batch = 5, m = 4, n = 3, k = 7;
  const Vec a = random_vec(batch * m * k, rng), b = random_vec(batch * k * n, rng);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Vec c(size_t(batch * m * n), NAN);
      matmul_f64(batch, m, n, k, a.data(), ta, b.data(), tb, c.data());
      for (int64_t i = 0; i < batch; ++i) {
        const Vec ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
        const Vec bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
        const Vec want = fma_chain_product(m, n, k, ai, ta, bi, tb, Vec(size_t(m * n)), false);
        ASSERT_EQ(Vec(c.begin() + i * m * n, c.begin() + (i + 1) * m * n), want)
            << "product " << i << " ta=" << ta << " tb=" << tb;
      }
    }
}

// The geometries of the reference tests, 2-d and 3-d, and two whose column
// matrices come in several chunks, one of them splitting an image.
std::vector<Conv2dGeom> every_geometry() {
  std::vector<Conv2dGeom> all = conv_geometries();
  for (const Conv2dGeom& g : conv3d_geometries()) all.push_back(g);
  all.push_back(conv_geom(3, 512, 9, 9, 4, 3, 3, 1, 1, 1, 1));             // 4608 rows: 455 columns
  all.push_back(conv_geom(2, 256, 12, 12, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2));  // grouped, chunked
  return all;
}

// Each element against the direct loops, within 1e-13 of the sum of its
// terms' magnitudes: rounding (the loops round each product and each sum,
// the fma chains once a term; the input gradient sums in another order),
// where a wrong or missing tap would be off by a whole term.
void expect_within_rounding(const Vec& got, const Vec& want, const Vec& magnitude,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-13 * magnitude[i]) << what << " at element " << i;
}

Vec magnitudes(const Vec& v) {
  Vec a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]);
  return a;
}

TEST(ConvF64, MatchesTheDirectLoopsInEveryGeometry) {
  std::mt19937 rng(6);
  for (const Conv2dGeom& g : every_geometry()) {
    SCOPED_TRACE(describe(g));
    const Vec x = random_vec(x_size(g), rng), w = random_vec(w_size(g), rng);
    const Vec dy = random_vec(y_size(g), rng);
    const Vec ax = magnitudes(x), aw = magnitudes(w), ady = magnitudes(dy);
    Vec want(size_t(y_size(g))), got(want.size(), NAN), size(want.size());
    conv2d_ref(g, x.data(), w.data(), want.data());
    conv2d_ref(g, ax.data(), aw.data(), size.data());
    conv2d_f64(g, x.data(), w.data(), got.data());
    expect_within_rounding(got, want, size, "conv2d");

    want.assign(size_t(x_size(g)), 0.0), got.assign(want.size(), NAN), size = want;
    conv2d_input_grad_ref(g, dy.data(), w.data(), want.data());
    conv2d_input_grad_ref(g, ady.data(), aw.data(), size.data());
    conv2d_input_grad_f64(g, dy.data(), w.data(), got.data());
    expect_within_rounding(got, want, size, "conv2d_input_grad");

    want.assign(size_t(w_size(g)), 0.0), got.assign(want.size(), NAN), size = want;
    conv2d_weight_grad_ref(g, x.data(), dy.data(), want.data());
    conv2d_weight_grad_ref(g, ax.data(), ady.data(), size.data());
    conv2d_weight_grad_f64(g, x.data(), dy.data(), got.data());
    expect_within_rounding(got, want, size, "conv2d_weight_grad");
  }
}

TEST(ConvF64, GivesTheSameBitsOnAnyTeam) {
  std::mt19937 rng(7);
  for (const Conv2dGeom& g : every_geometry()) {
    SCOPED_TRACE(describe(g));
    const Vec x = random_vec(x_size(g), rng), w = random_vec(w_size(g), rng);
    const Vec dy = random_vec(y_size(g), rng);
    const std::vector<Vec> runs = on_every_team([&] {
      Vec y(size_t(y_size(g))), dx(size_t(x_size(g))), dw(size_t(w_size(g)));
      conv2d_f64(g, x.data(), w.data(), y.data());
      conv2d_input_grad_f64(g, dy.data(), w.data(), dx.data());
      conv2d_weight_grad_f64(g, x.data(), dy.data(), dw.data());
      Vec all = y;
      all.insert(all.end(), dx.begin(), dx.end());
      all.insert(all.end(), dw.begin(), dw.end());
      return all;
    });
    for (size_t i = 1; i < runs.size(); ++i) ASSERT_EQ(runs[i], runs[0]) << "run " << i;
  }
}

}  // namespace
}  // namespace ws::exec
