#include "lower/pipeline.hpp"

#include "ir/dump.hpp"
#include "ir/verify.hpp"
#include "lower/assign_layouts.hpp"
#include "lower/fold_constants.hpp"
#include "lower/fuse_activation_into_product.hpp"
#include "lower/fuse_bias_into_product.hpp"
#include "lower/fuse_elementwise.hpp"
#include "lower/fuse_product_into_loop.hpp"
#include "lower/fuse_residual_into_product.hpp"
#include "lower/fuse_update_into_product.hpp"
#include "lower/merge_padded_sums.hpp"
#include "lower/merge_product_sums.hpp"
#include "lower/move_reshapes.hpp"
#include "lower/schedule_collectives.hpp"
#include "lower/simplify.hpp"

namespace ws::lower {

const std::vector<Pass>& all_passes() {
  static const std::vector<Pass> passes = {
      {"simplify", simplify},
      {"channels_last", channels_last},
      {"blocked_layouts", blocked_layouts},
      {"blocked_layouts_of_8", blocked_layouts_of_8},
      {"merge_product_sums", merge_product_sums},
      {"update_into_product", fuse_update_into_product},
      {"bias_into_product", fuse_bias_into_product},
      {"activation_into_product", fuse_activation_into_product},
      {"residual_into_product", fuse_residual_into_product},
      {"merge_padded_sums", merge_padded_sums},
      {"move_reshapes", move_reshapes},
      {"fuse", fuse_elementwise},
      {"product_into_loop", fuse_product_into_loop},
      // Last, where lowering folded constants before it was a pass: only
      // what no fused loop computes.
      {"fold_constants", fold_constants},
      // Last: the kernels run in node order.
      {"schedule_collectives", schedule_collectives},
  };
  return passes;
}

const Pass* find_pass(std::string_view name) {
  for (const Pass& p : all_passes())
    if (name == p.name) return &p;
  return nullptr;
}

std::string pass_names() {
  std::string out;
  for (const Pass& p : all_passes()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

std::vector<Pass> graph_passes(const LowerOptions& opts) {
  std::vector<Pass> passes;
  for (const Pass& p : all_passes()) {
    const std::string_view name = p.name;
    if (name == "channels_last") {
      if (opts.layouts == ir::ImageLayout::nhwc) passes.push_back(p);
      continue;
    }
    if (name == "blocked_layouts" || name == "blocked_layouts_of_8") {
      // Blocks of the width this CPU's convolutions read.
      if (opts.layouts == ir::ImageLayout::nChw16c && name == blocked_layouts_pass_for_this_cpu())
        passes.push_back(p);
      continue;
    }
    if (opts.fuse || name == "simplify" || name == "fold_constants" ||
        name == "schedule_collectives")
      passes.push_back(p);
  }
  return passes;
}

ir::Graph run_passes(const ir::Graph& g, const std::vector<Pass>& passes) {
  ir::Graph cur = g;
  for (size_t i = 0; i < passes.size(); ++i) {
    const Pass& p = passes[i];
    bool changed = false;
    cur = p.run(cur, &changed);
    // An unchanged graph is the one verified after the pass before (the
    // first pass's input is verified here too).
    if ((changed || i == 0) && ir::verify_enabled()) ir::verify_with_round_trip(cur);
    ir::dump(cur, cur.name + "." + p.name + (changed ? "" : ".unchanged"));
  }
  return cur;
}

}  // namespace ws::lower
