#include "lower/pipeline.hpp"

#include "ir/dump.hpp"
#include "ir/verify.hpp"
#include "lower/fuse_activation_into_product.hpp"
#include "lower/fuse_bias_into_product.hpp"
#include "lower/fuse_elementwise.hpp"
#include "lower/fuse_residual_into_product.hpp"
#include "lower/fuse_update_into_product.hpp"
#include "lower/merge_padded_sums.hpp"
#include "lower/move_reshapes.hpp"
#include "lower/simplify.hpp"

namespace ws::lower {

std::vector<Pass> graph_passes(const LowerOptions& opts) {
  std::vector<Pass> passes = {{"simplify", simplify}};
  if (opts.fuse) {
    passes.push_back({"update_into_product", fuse_update_into_product});
    passes.push_back({"bias_into_product", fuse_bias_into_product});
    passes.push_back({"activation_into_product", fuse_activation_into_product});
    passes.push_back({"residual_into_product", fuse_residual_into_product});
    passes.push_back({"merge_padded_sums", merge_padded_sums});
    passes.push_back({"move_reshapes", move_reshapes});
    passes.push_back({"fuse", fuse_elementwise});
  }
  return passes;
}

ir::Graph run_passes(const ir::Graph& g, const std::vector<Pass>& passes) {
  ir::Graph cur = g;
  for (const Pass& p : passes) {
    cur = p.run(cur);
    if (ir::verify_enabled()) ir::verify_with_round_trip(cur);
    ir::dump(cur, cur.name + "." + p.name);
  }
  return cur;
}

}  // namespace ws::lower
