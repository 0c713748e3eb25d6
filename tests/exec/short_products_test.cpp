// Products over a short contraction (exec/short_products.hpp): every
// element is the chain of fused multiply-adds from 0 over its K terms, in
// order, on any team and in any part of C a thread computes; the bias and
// the residual each round once after it; the scratch holds what it asked
// for; and make_backend_op gives exactly the products the definition names
// to these loops.
#include "exec/short_products.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "exec/product_checks.hpp"
#include "exec/threads.hpp"
#include "ir/attr.hpp"

namespace ws::exec {
namespace {

using ir::Op;
using namespace product_checks;

// One case: `batch` products [m x k] x [k x n], A stored [k, m] when ta, B
// [n, k] when tb, C written row-major or transposed ([n, m] per matrix).
struct Case {
  int64_t batch, m, k, n;
  bool ta, tb, bias, residual, c_transposed;
  std::string str() const {
    return fmt::format("{} x [{} x {}] x [{} x {}]{}{}{}{}{}", batch, m, k, k, n, ta ? " ta" : "",
                       tb ? " tb" : "", bias ? " bias" : "", residual ? " residual" : "",
                       c_transposed ? " C transposed" : "");
  }
};

// What the definition says each element is.
std::vector<float> expected(const Case& c, const std::vector<float>& a, const std::vector<float>& b,
                            const std::vector<float>& bias, const std::vector<float>& old) {
  std::vector<float> y(old.size());
  for (int64_t t = 0; t < c.batch; ++t)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        float s = 0.0f;
        for (int64_t q = 0; q < c.k; ++q) {
          const float x = a[size_t(t * c.m * c.k + (c.ta ? q * c.m + i : i * c.k + q))];
          const float w = b[size_t(t * c.k * c.n + (c.tb ? j * c.k + q : q * c.n + j))];
          s = std::fma(x, w, s);
        }
        if (c.bias) s = s + bias[size_t(j)];
        const size_t at = size_t(t * c.m * c.n + (c.c_transposed ? j * c.m + i : i * c.n + j));
        y[at] = c.residual ? old[at] + s : s;
      }
  return y;
}

// The op for a case, built as make_matmul builds it.
std::shared_ptr<const BackendOp> op_for(const Case& c) {
  ShortProduct p;
  p.m = c.m, p.n = c.n, p.k = c.k;
  p.a_m = c.ta ? 1 : c.k, p.a_k = c.ta ? c.m : 1;
  p.b_k = c.tb ? 1 : c.n, p.b_n = c.tb ? c.k : 1;
  std::vector<int64_t> oa, ob, oo;
  for (int64_t t = 0; t < c.batch; ++t) {
    oa.push_back(t * c.m * c.k);
    ob.push_back(t * c.k * c.n);
    oo.push_back(t * c.m * c.n);
  }
  return make_short_product(p, oa, ob, oo, c.c_transposed ? 1 : c.n, c.c_transposed ? c.m : 1,
                            c.bias, c.residual);
}

TEST(ShortProducts, EachElementIsTheChainOfItsTermsOnAnyTeam) {
  std::mt19937 rng(7);
  std::vector<Case> cases;
  // Rows around the kernel's blocks of 4 and a task's 16; columns around its
  // blocks of 16 (32 with AVX-512) and whole-row tiles; every K.
  for (int64_t m : {1, 3, 4, 5, 17, 33})
    for (int64_t n : {16, 17, 33, 47, 100, 513})
      for (int64_t k : {1, 2, 3, 8, 16}) {
        const int pick = int(rng() % 32);
        cases.push_back({1 + (pick & 1), m, k, n, bool(pick & 2), bool(pick & 4), bool(pick & 8),
                         bool(pick & 16), rng() % 4 == 0});
      }
  const int before = num_threads();
  for (const Case& c : cases) {
    const std::vector<float> a = random_floats(c.batch * c.m * c.k, rng),
                             b = random_floats(c.batch * c.k * c.n, rng),
                             bias = random_floats(c.n, rng),
                             old = random_floats(c.batch * c.m * c.n, rng);
    const std::vector<float> want = expected(c, a, b, bias, old);
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const auto op = op_for(c);
      expect_same_bits(run(*op, a, b, bias, old, c.str()), want,
                       fmt::format("{} on {} threads", c.str(), threads));
    }
  }
  set_num_threads(before);
}

// A part of C computed alone is that part of the whole: what lets a loop
// take the product a tile at a time.
TEST(ShortProducts, RowsOfAnyPieceAreTheWholeProductsRows) {
  std::mt19937 rng(11);
  const Case c{1, 37, 8, 2100, true, false, false, false, false};
  const std::vector<float> a = random_floats(c.m * c.k, rng), b = random_floats(c.k * c.n, rng);
  const std::vector<float> whole = expected(c, a, b, {}, std::vector<float>(size_t(c.m * c.n)));
  ShortProduct p;
  p.m = c.m, p.n = c.n, p.k = c.k, p.a_m = 1, p.a_k = c.m, p.b_k = c.n, p.b_n = 1;
  std::vector<float> staged(size_t(p.staged_bytes() / 4));
  stage_short_b(p, b.data(), 0, p.k, staged.data());
  for (auto [i0, rows, j0, cols] : {std::array<int64_t, 4>{0, 4, 0, 2048},
                                    {5, 3, 2048, 52},
                                    {33, 4, 17, 1},
                                    {36, 1, 0, 2100},
                                    {2, 2, 1000, 999}}) {
    std::vector<float> piece(size_t(rows * cols));
    short_product_rows(p, a.data(), staged.data(), i0, rows, j0, cols, piece.data(), cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_EQ(bits_of(piece[size_t(i * cols + j)]),
                  bits_of(whole[size_t((i0 + i) * c.n + j0 + j)]))
            << "rows from " << i0 << ", columns from " << j0 << ": element " << i << ", " << j;
  }
}

TEST(ShortProducts, ResultsFarLargerThanTheCachesAreStoredPastThem) {
  std::mt19937 rng(3);
  const Case c{1, 4096, 2, 4096, true, false, false, false, false};
  const auto op = op_for(c);
  EXPECT_NE(op->impl().find("past the caches"), std::string::npos) << op->impl();
  const std::vector<float> a = random_floats(c.m * c.k, rng), b = random_floats(c.k * c.n, rng);
  const std::vector<float> want = expected(c, a, b, {}, std::vector<float>(size_t(c.m * c.n)));
  // Aligned (streamed), and one float off (stored through the caches).
  std::vector<float> y(size_t(c.m * c.n) + 16);
  float* aligned = y.data() + (16 - reinterpret_cast<uintptr_t>(y.data()) / 4 % 16) % 16;
  for (float* out : {aligned, aligned + 1}) {
    std::vector<std::byte> scratch(size_t(op->scratch_bytes()) + 64);
    void* s = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    std::fill(y.begin(), y.end(), NAN);
    op->run(a.data(), b.data(), out, s);
    for (int64_t e = 0; e < c.m * c.n; e += 997)
      ASSERT_EQ(bits_of(out[e]), bits_of(want[size_t(e)])) << "element " << e;
    ASSERT_EQ(bits_of(out[c.m * c.n - 1]), bits_of(want.back()));
  }
}

// The definition: a contraction of 1 to 16, rows of 16 columns or more, and
// 2^20 results or more; every f32 product op of such a shape computes it.
TEST(ShortProducts, BackendOpsOfShortContractionsAreTheseLoops) {
  auto impl_of = [](Op op, int64_t m, int64_t k, int64_t n) {
    ir::Attrs attrs;
    std::vector<ir::Type> in{{DType::f32, {m, k}}, {DType::f32, {k, n}}};
    if (op == Op::matmul_bias || op == Op::matmul_bias_add) in.push_back({DType::f32, {n}});
    return make_backend_op(op, attrs, in, {DType::f32, {m, n}})->impl();
  };
  for (Op op : {Op::matmul, Op::matmul_bias, Op::matmul_add, Op::matmul_bias_add})
    EXPECT_EQ(impl_of(op, 1024, 8, 1024).rfind("short product", 0), 0u)
        << ir::op_name(op) << ": " << impl_of(op, 1024, 8, 1024);
  EXPECT_EQ(impl_of(Op::matmul, 65536, 16, 16).rfind("short product", 0), 0u);
  EXPECT_EQ(impl_of(Op::matmul, 1024, 17, 1024).find("short product"), std::string::npos);
  EXPECT_EQ(impl_of(Op::matmul, 1023, 8, 1024).find("short product"), std::string::npos);
  EXPECT_EQ(impl_of(Op::matmul, 131072, 8, 15).find("short product"), std::string::npos);
}

}  // namespace
}  // namespace ws::exec
