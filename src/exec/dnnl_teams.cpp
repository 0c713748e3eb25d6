// Backend ops whose bits do not depend on the team.
//
// oneDNN makes a primitive for the team OpenMP would give when it is made,
// and the primitive keeps that team whatever OpenMP is told later. Two
// things follow. A step that runs on one thread under load (team_chooser.hpp)
// needs primitives made for one thread: TeamOrSoloOp holds both and runs the
// one team() asks for. And a primitive that splits a sum across its threads
// rounds differently for each team: of the backend ops only the convolution
// weight gradient does (products and the other convolutions compute each
// output whole on one thread), so it sums fixed parts of the batch itself
// (BatchPartsOp). With both, a step gives the same bits on any team.
#include "exec/dnnl_teams.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// conv2d_weight_grad as a sum over parts of the batch fixed by the shape:
// kWeightGradParts parts (fewer for a small batch), each a primitive made
// for one thread, run in parallel over the parts and added in part order.
// On the cnn's two threads it runs as fast as oneDNN's own split, on one
// thread 3% slower (docs/performance.md, "A loaded machine").
constexpr int64_t kWeightGradParts = 4;

class BatchPartsOp final : public BackendOp {
 public:
  explicit BatchPartsOp(const Conv2dGeom& g) {
    const int64_t parts = std::min(g.n, kWeightGradParts);
    x_image_ = g.c * g.h * g.w;
    dy_image_ = g.o * g.oh * g.ow;
    dw_numel_ = g.o * (g.c / g.groups) * g.kh * g.kw;
    TeamScope one(1);  // each part runs on one thread
    for (int64_t i = 0; i < parts; ++i) {
      Conv2dGeom gi = g;
      first_.push_back(g.n * i / parts);
      gi.n = g.n * (i + 1) / parts - first_.back();
      Part p{make_conv(ir::Op::conv2d_weight_grad, gi), scratch_bytes_, -1};
      scratch_bytes_ += align64(p.op->scratch_bytes());
      if (i > 0) p.sum_offset = scratch_bytes_, scratch_bytes_ += align64(dw_numel_ * 4);
      flops_ += p.op->flops();
      parts_.push_back(std::move(p));
    }
    impl_ = fmt::format("{} batch parts, each {}", parts, parts_[0].op->impl());
  }
  int64_t scratch_bytes() const override { return scratch_bytes_; }
  const std::string& impl() const override { return impl_; }
  int64_t flops() const override { return flops_; }

  void run(const void* a, const void* b, void* out, void* scratch, const void*,
           const void*) const override {
    const auto* x = static_cast<const float*>(a);
    const auto* dy = static_cast<const float*>(b);
    auto* base = static_cast<std::byte*>(scratch);
    auto sum = [&](size_t i) {
      return i == 0 ? static_cast<float*>(out)
                    : reinterpret_cast<float*>(base + parts_[i].sum_offset);
    };
    parallel_for(
        int64_t(parts_.size()), 1,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const Part& p = parts_[size_t(i)];
            p.op->run(x + first_[size_t(i)] * x_image_, dy + first_[size_t(i)] * dy_image_,
                      sum(size_t(i)), base + p.scratch_offset);
          }
        },
        1);
    float* dw = sum(0);
    parallel_for(dw_numel_, kCheapGrain / int64_t(parts_.size()), [&](int64_t lo, int64_t hi) {
      for (size_t i = 1; i < parts_.size(); ++i) {
        const float* s = sum(i);
        for (int64_t j = lo; j < hi; ++j) dw[j] += s[j];
      }
    });
  }

 private:
  struct Part {
    std::shared_ptr<const BackendOp> op;
    int64_t scratch_offset = 0;
    int64_t sum_offset = -1;  // where its partial sum goes (the first: `out`)
  };
  std::vector<Part> parts_;
  std::vector<int64_t> first_;  // each part's first image
  int64_t x_image_ = 0, dy_image_ = 0, dw_numel_ = 0, scratch_bytes_ = 0, flops_ = 0;
  std::string impl_;
};

// A backend op made for the whole pool and for one thread, running the one
// team() asks for.
class TeamOrSoloOp final : public BackendOp {
 public:
  TeamOrSoloOp(std::shared_ptr<const BackendOp> whole, std::shared_ptr<const BackendOp> solo)
      : whole_(std::move(whole)), solo_(std::move(solo)) {}
  int64_t scratch_bytes() const override {
    return std::max(whole_->scratch_bytes(), solo_->scratch_bytes());
  }
  const std::string& impl() const override { return whole_->impl(); }
  int64_t flops() const override { return whole_->flops(); }
  void run(const void* a, const void* b, void* out, void* scratch, const void* extra,
           const void* extra2) const override {
    (team() == 1 ? solo_ : whole_)->run(a, b, out, scratch, extra, extra2);
  }

 private:
  std::shared_ptr<const BackendOp> whole_, solo_;
};

}  // namespace

std::shared_ptr<const BackendOp> make_weight_grad_in_parts(const Conv2dGeom& g) {
  return std::make_shared<BatchPartsOp>(g);
}

std::shared_ptr<const BackendOp> make_team_or_solo(std::shared_ptr<const BackendOp> whole,
                                                   std::shared_ptr<const BackendOp> solo) {
  return std::make_shared<TeamOrSoloOp>(std::move(whole), std::move(solo));
}

}  // namespace ws::exec
