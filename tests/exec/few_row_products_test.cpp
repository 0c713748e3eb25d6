// Products of few rows (exec/few_row_products.hpp): every element is summed
// in the order the header defines (the fma chain over K for B as it lies;
// chunks of lane partials in a fixed tree for B transposed), on any team and
// whatever the strides; the bias and the residual each round once after it;
// the result is within rounding of float64; and make_backend_op gives
// exactly the products the definition names to these loops.
#include "exec/few_row_products.hpp"

#include <cmath>
#include <cstdint>
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
namespace few_rows {  // its own names in the unity build

using ir::Op;
using namespace product_checks;

// One case: [m x k] x [k x n], A stored [k, m] when at, B [n, k] when tb, C
// written [n, m] when ct; each operand's rows `pad` elements longer than
// the matrix's.
struct Case {
  int64_t m, k, n;
  bool at, tb, ct, bias, residual;
  int64_t pad;
  FewRowProduct product() const {
    return {.m = m,
            .n = n,
            .k = k,
            .a_m = at ? 1 : k + pad,
            .a_k = at ? m + pad : 1,
            .ldb = (tb ? k : n) + pad,
            .c_m = ct ? 1 : n + pad,
            .c_n = ct ? m + pad : 1,
            .tb = tb};
  }
  int64_t a_size() const { return at ? k * (m + pad) : m * (k + pad); }
  int64_t b_size() const { return tb ? n * (k + pad) : k * (n + pad); }
  int64_t c_size() const { return ct ? n * (m + pad) : m * (n + pad); }
  std::string str() const {
    return fmt::format("[{} x {}]{} x [{} x {}]{}{}{}{}, rows {} longer", m, k,
                       at ? " stored t" : "", k, n, tb ? " tb" : "", ct ? ", C stored t" : "",
                       bias ? " bias" : "", residual ? " residual" : "", pad);
  }
};

struct Operands {
  std::vector<float> a, b, bias, old;
};

Operands operands_for(const Case& c, std::mt19937& rng) {
  return {random_floats(c.a_size(), rng), random_floats(c.b_size(), rng), random_floats(c.n, rng),
          random_floats(c.c_size(), rng)};
}

// The header's order for element (i, j).
float ordered_sum(const Case& c, const Operands& o, int64_t i, int64_t j) {
  const FewRowProduct p = c.product();
  auto a = [&](int64_t q) { return o.a[size_t(i * p.a_m + q * p.a_k)]; };
  auto b = [&](int64_t q) { return o.b[size_t(c.tb ? j * p.ldb + q : q * p.ldb + j)]; };
  if (!c.tb) {
    float s = 0.0f;
    for (int64_t q = 0; q < c.k; ++q) s = std::fma(a(q), b(q), s);
    return s;
  }
  float total = 0.0f;
  for (int64_t c0 = 0; c0 < c.k; c0 += kFewRowsChunk) {
    const int64_t len = std::min(kFewRowsChunk, c.k - c0);
    const int64_t lanes = few_row_lanes(), steps = (len + lanes - 1) / lanes;
    std::vector<float> partial(size_t(lanes), 0.0f);
    for (int64_t q = c0; q < c0 + steps * lanes; ++q) {
      const bool in = q < c0 + len;  // lanes past K read zeros
      float& l = partial[size_t((q - c0) % lanes)];
      l = std::fma(in ? a(q) : 0.0f, in ? b(q) : 0.0f, l);
    }
    for (int64_t w = lanes / 2; w >= 1; w /= 2)
      for (int64_t l = 0; l < w; ++l)
        partial[size_t(l)] = partial[size_t(l)] + partial[size_t(l + w)];
    total = c0 == 0 ? partial[0] : total + partial[0];
  }
  return total;
}

// C as the definition gives it (the padding of its rows as they were).
std::vector<float> expected(const Case& c, const Operands& o) {
  const FewRowProduct p = c.product();
  std::vector<float> y = o.old;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      float s = ordered_sum(c, o, i, j);
      if (c.bias) s = s + o.bias[size_t(j)];
      float& out = y[size_t(i * p.c_m + j * p.c_n)];
      out = c.residual ? out + s : s;
    }
  return y;
}

TEST(FewRowProducts, EachElementIsSummedInTheDefinedOrderOnAnyTeam) {
  std::mt19937 rng(5);
  std::vector<Case> cases;
  // Rows around the register blocks (4, and 8 with AVX-512), every
  // remainder of 4; K around the
  // vector steps, the lines of 16 and the chunks of 512; columns around the
  // tiles of two vectors and a thread's range.
  for (int64_t m : {1, 3, 4, 5, 6, 9, 16})
    for (int64_t k : {1, 7, 16, 37, 512, 1030})
      for (int64_t n : {1, 15, 17, 33, 100, 257}) {
        const int pick = int(rng() % 64);
        cases.push_back({m, k, n, bool(pick & 16), bool(pick & 1), bool(pick & 32), bool(pick & 2),
                         bool(pick & 4), (pick & 8) ? int64_t(3) : int64_t(0)});
      }
  const int before = num_threads();
  for (const Case& c : cases) {
    const Operands o = operands_for(c, rng);
    const std::vector<float> want = expected(c, o);
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const auto op = make_few_row_product(c.product(), c.bias, c.residual);
      expect_same_bits(run(*op, o.a, o.b, o.bias, o.old, c.str()), want,
                       fmt::format("{} on {} threads", c.str(), threads));
    }
  }
  set_num_threads(before);
}

// Each element against its float64 sum: within K roundings of the terms'
// magnitudes (a bound any order meets), so that the order itself is sound.
TEST(FewRowProducts, ResultsAreWithinRoundingOfFloat64) {
  std::mt19937 rng(9);
  for (const Case& c : {Case{8, 9216, 300, false, true, false, false, false, 0},
                        Case{8, 4096, 700, false, false, false, false, false, 0},
                        Case{13, 2049, 129, true, true, true, true, false, 5}}) {
    const Operands o = operands_for(c, rng);
    const FewRowProduct p = c.product();
    const std::vector<float> got =
        run(*make_few_row_product(p, c.bias, c.residual), o.a, o.b, o.bias, o.old, c.str());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          const double x = o.a[size_t(i * p.a_m + q * p.a_k)],
                       w = o.b[size_t(c.tb ? j * p.ldb + q : q * p.ldb + j)];
          exact += x * w;
          magnitude += std::fabs(x * w);
        }
        if (c.bias) exact += o.bias[size_t(j)], magnitude += std::fabs(o.bias[size_t(j)]);
        const double bound = double(c.k + 2) * magnitude * std::ldexp(1.0, -24);
        ASSERT_LE(std::fabs(got[size_t(i * p.c_m + j * p.c_n)] - exact), bound)
            << c.str() << ": element " << i << ", " << j;
      }
  }
}

// The definition: A of 1 to 16 rows, B of 512 KiB or more read along its
// rows (of N, or of K), one matrix, and not a matrix-vector product over a
// transposed B; every f32 product op of such a product computes it,
// whatever strides its operands are read at.
TEST(FewRowProducts, BackendOpsOfFewRowsOverALargeBAreTheseLoops) {
  auto impl_of = [](Op op, int64_t m, int64_t k, int64_t n, bool tb = false, bool ta = false,
                    int64_t batch = 1) {
    ir::Attrs attrs;
    if (ta) ir::set_attr<Op::matmul, "transpose_a">(attrs, 1);
    if (tb) ir::set_attr<Op::matmul, "transpose_b">(attrs, 1);
    std::vector<ir::Type> in{{DType::f32, ta ? Shape{k, m} : Shape{m, k}},
                             {DType::f32, tb ? Shape{n, k} : Shape{k, n}}};
    if (op == Op::matmul_bias || op == Op::matmul_bias_add) in.push_back({DType::f32, {n}});
    if (batch > 1)
      for (ir::Type& t : in) t.shape.insert(t.shape.begin(), batch);
    Shape out{m, n};
    if (batch > 1) out.insert(out.begin(), batch);
    return make_backend_op(op, attrs, in, {DType::f32, out})->impl();
  };
  for (Op op : {Op::matmul, Op::matmul_bias, Op::matmul_add, Op::matmul_bias_add})
    for (bool tb : {false, true})
      EXPECT_NE(impl_of(op, 8, 512, 256, tb).find("few-row product"), std::string::npos)
          << ir::op_name(op) << (tb ? " tb: " : ": ") << impl_of(op, 8, 512, 256, tb);
  EXPECT_NE(impl_of(Op::matmul, 16, 4096, 4096).find("few-row product"), std::string::npos);
  EXPECT_NE(impl_of(Op::matmul, 1, 4096, 4096).find("few-row product"), std::string::npos);
  EXPECT_EQ(impl_of(Op::matmul, 1, 4096, 4096, true).find("few-row"), std::string::npos);
  EXPECT_EQ(impl_of(Op::matmul, 17, 4096, 4096).find("few-row"), std::string::npos);
  EXPECT_EQ(impl_of(Op::matmul, 8, 512, 255).find("few-row"), std::string::npos);
  EXPECT_NE(impl_of(Op::matmul, 4, 4096, 4096, false, true).find("few-row"), std::string::npos);
  EXPECT_EQ(impl_of(Op::matmul, 8, 512, 1024, false, false, 2).find("few-row"), std::string::npos);
  // A transpose folded into the strides: B read [n, k] as it lies, A
  // transposed, C written transposed.
  const int64_t m = 8, k = 512, n = 300;
  const std::vector<ir::Type> in{{DType::f32, {m, k}}, {DType::f32, {k, n}}};
  const std::vector<std::vector<int64_t>> strides{{1, m}, {1, k}};
  const auto op = make_backend_op(Op::matmul, {}, in, {DType::f32, {m, n}}, strides, {1, m});
  EXPECT_EQ(op->impl(), fmt::format("few-row product [{}x{}x{}] tb", m, k, n));
  std::mt19937 rng(2);
  const Case c{m, k, n, true, true, true, false, false, 0};
  const Operands o = operands_for(c, rng);
  expect_same_bits(run(*op, o.a, o.b, o.bias, o.old, "strided"), expected(c, o),
                   "a product of strided operands");
}

}  // namespace few_rows
}  // namespace
}  // namespace ws::exec
