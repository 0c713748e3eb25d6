// matmul_add's accumulation and the empty product (dnnl_accumulate.hpp).
#include "exec/dnnl_accumulate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "exec/loops.hpp"
#include "exec/parallel.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {
namespace {

using ir::Op;

// A product over an empty dimension: zeros (oneDNN leaves such outputs
// unwritten).
class ZeroOp final : public BackendOp {
 public:
  ZeroOp(int64_t bytes, bool add) : bytes_(bytes), add_(add) {}
  int64_t scratch_bytes() const override { return 0; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return 0; }
  void run(const void*, const void*, void* out, void*, const void*,
           const void* beta) const override {
    if (!add_) {
      if (bytes_ > 0) std::memset(out, 0, size_t(bytes_));  // out may be null when empty
      return;
    }
    // matmul_add adds nothing: out = beta * out
    const float b = *static_cast<const float*>(beta);
    float* y = static_cast<float*>(out);
    for (int64_t i = 0; i < bytes_ / 4; ++i) y[i] = std::fma(y[i], b, 0.0f);
  }

 private:
  int64_t bytes_;
  bool add_;  // matmul_add: the destination keeps its values
  std::string impl_ = "zeros";
};

// matmul_add, out = beta * out + alpha * (a @ b). oneDNN 2.6 fixes a sum
// post-op's scale when the primitive is created, while beta is a value of
// the step (SGD's momentum, or 1 - lr * wd, which a learning-rate schedule
// changes every step). So a beta other than 1 scales `out` in place first:
// no primitive is made per step, the result depends only on the values (the
// same bits resumed or not, whatever beta was before), and the rounding is
// the unfused update's, (beta * out) + (alpha * (a @ b)).
//
// Where the plain product is oneDNN's brgemm kernel, the one primitive,
// made at compile time, adds with scale 1: the product is the plain
// product's kernel, rounded as the unfused product is, then multiplied by
// alpha and added to out by post-ops (make_matmul); an alpha of 1 (SGD's
// momentum without dampening, the common case) needs no multiply, so a
// second primitive without it, made at compile time too, runs then.
// Elsewhere (gemm:jit, oneDNN's products on CPUs without AVX-512) a sum
// post-op adds blocks of K to out one by one, and alpha takes the reference
// kernel: the plain product goes to the scratch, then our loops multiply and
// add, the unfused update's roundings.
class AccumulateOp final : public BackendOp {
 public:
  // The product in post-ops: `scaled` adds alpha * (a @ b), `unit` a @ b.
  AccumulateOp(std::shared_ptr<const BackendOp> scaled, std::shared_ptr<const BackendOp> unit,
               int64_t n)
      : sum_(std::move(scaled)),
        unit_(std::move(unit)),
        n_(n),
        impl_(fmt::format("{} (alpha other than 1: {})", unit_->impl(), sum_->impl())) {}
  // The plain product `product` into the scratch, then the loops.
  AccumulateOp(std::shared_ptr<const BackendOp> product, int64_t n)
      : plain_(std::move(product)),
        n_(n),
        product_offset_((plain_->scratch_bytes() + 63) / 64 * 64),
        impl_(fmt::format("{}, then added", plain_->impl())) {}
  int64_t scratch_bytes() const override {
    if (plain_) return product_offset_ + n_ * 4;
    return std::max(sum_->scratch_bytes(), unit_->scratch_bytes());
  }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return (plain_ ? plain_ : sum_)->flops(); }
  Reorders reorders() const override { return (plain_ ? plain_ : sum_)->reorders(); }
  void run(const void* a, const void* b, void* out, void* scratch, const void* alpha,
           const void* beta) const override {
    WS_CHECK(beta) << "matmul_add run without its beta";
    WS_CHECK(alpha) << "matmul_add run without its alpha";
    const auto* ap = static_cast<const float*>(alpha);
    const auto* bp = static_cast<const float*>(beta);
    auto* y = static_cast<float*>(out);
    if (*bp != 1.0f)
      parallel_for(n_, kCheapGrain, [=](int64_t lo, int64_t hi) {
        binary_range<float, Op::mul, float>(y, bp, y, true, false, lo, hi);
      });
    if (!plain_) {
      if (*ap == 1.0f)
        unit_->run(a, b, out, scratch);
      else
        sum_->run(a, b, out, scratch, alpha);
      return;
    }
    auto* p = reinterpret_cast<float*>(static_cast<std::byte*>(scratch) + product_offset_);
    plain_->run(a, b, p, scratch);
    const bool scale = *ap != 1.0f;
    parallel_for(n_, kCheapGrain, [=](int64_t lo, int64_t hi) {
      if (scale) binary_range<float, Op::mul, float>(p, ap, p, true, false, lo, hi);
      binary_range<float, Op::add, float>(y, p, y, true, true, lo, hi);
    });
  }

 private:
  std::shared_ptr<const BackendOp> sum_;    // out += alpha * (a @ b)
  std::shared_ptr<const BackendOp> unit_;   // out += a @ b
  std::shared_ptr<const BackendOp> plain_;  // a @ b, into the scratch
  int64_t n_;
  int64_t product_offset_ = 0;
  std::string impl_;
};

}  // namespace

std::shared_ptr<const BackendOp> make_zero_product(int64_t bytes, bool add) {
  return std::make_shared<ZeroOp>(bytes, add);
}

std::shared_ptr<const BackendOp> make_accumulate_in_post_ops(
    std::shared_ptr<const BackendOp> scaled, std::shared_ptr<const BackendOp> unit, int64_t n) {
  return std::make_shared<AccumulateOp>(std::move(scaled), std::move(unit), n);
}

std::shared_ptr<const BackendOp> make_accumulate_after(std::shared_ptr<const BackendOp> product,
                                                       int64_t n) {
  return std::make_shared<AccumulateOp>(std::move(product), n);
}

}  // namespace ws::exec
