// ZeRO stage 1 in the step graph (StepOptions::zero): the optimizer state
// sharded over the ranks of a data-parallel step.
//
// The gradients are packed into buckets, as for the all-reduce
// (reduce_gradients.hpp), within one update group each; each bucket is
// zero-padded to a multiple of the world size W and split into W equal
// parts. In the step graph, per bucket:
//
//   backward   reduce_scatter (mean) of the bucket's gradients: rank r gets
//              part r of their mean over the ranks;
//   optimizer  local_shard of the bucket's parameters (part r), the
//              update of that part with part r of each state slot (an
//              input of the step: the shard this rank keeps), then an
//              all_gather of the updated part, unpacked into every
//              parameter of the bucket.
//
// So each rank keeps and updates 1/W of the state, and every rank ends the
// step with all of the updated parameters. The loss, and the non-finite
// guard's verdict, are averaged over the ranks by one more all-reduce (the
// guard reads each rank's own gradients: a gradient mean is not finite
// only when some rank's part is not). Global-norm clipping sums its
// squares over the ranks by one all-reduce. A step count per parameter
// (PyTorch's Adam keeps one) is not sharded: every rank keeps and advances
// all of them alike, and a bucket's update reads each element's bias
// corrections from its parameter's count.
//
// The updates are elementwise, so the padding (zero gradient, zero
// parameter, zero state) stays zero and is never read back.
#pragma once

#include <memory>
#include <vector>

#include "ir/builder.hpp"
#include "step/capture_step.hpp"

namespace ws::step {

// Each rank's shards of the optimizer state, kept by the TrainStep across
// its input signatures (every signature's graph reads the same shards), and
// the optimizer's own per-parameter state tensors they stand for.
//
// The first compile lays the buckets out (in the order the backward
// computes the gradients); later signatures use the same layout. take_over
// fills the shards from the optimizer's tensors (which every rank then
// holds alike, broadcast from rank 0) and releases those: each becomes an
// empty tensor marked sharded (detail::TensorImpl::sharded), so the
// optimizer state takes 1/W of the memory it did; gather makes them whole
// again from every rank's shards, and the next step takes them over again
// (a checkpoint loaded into them in between is what it continues from).
// Another framework's tensors (borrowed: PyTorch's optimizer state) are
// not released, since their memory is not ours to free: they keep their
// values from the take-over, stale while the shards train, until gather
// writes the current ones into them.
class OptimizerShards {
 public:
  struct Bucket {
    size_t group = 0;            // its update group
    std::vector<size_t> params;  // param input indices, in packing order
    std::vector<ir::Type> types;
    int64_t part = 0;  // elements of one rank's part
    // The optimizer's tensor of each of the group's per-parameter state
    // slots that are sharded (all but a step count per parameter), per
    // parameter ([slot][param]); and this rank's shard of each such slot.
    std::vector<std::vector<Tensor>> full;
    std::vector<Tensor> shards;
  };

  bool laid_out() const { return !buckets_.empty(); }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  std::vector<Bucket>& buckets() { return buckets_; }

  // Fills the shards from the optimizer's tensors and releases those (not
  // borrowed ones), unless the shards hold the state already (after
  // construction, or after gather). Not collective.
  void take_over();
  // Makes the optimizer's tensors whole and current from every rank's
  // shards. Collective: every rank calls it.
  void gather();
  // Whether the shards hold the state (the optimizer's tensors are empty,
  // or, borrowed, stale).
  bool taken() const { return taken_; }

 private:
  std::vector<Bucket> buckets_;
  bool taken_ = false;
};

// The name of the input that is this rank's shard of `slot` of bucket k.
std::string shard_input_name(size_t bucket, const std::string& slot);

// append_step's updates under ZeRO: `grads` are each rank's own gradients
// (the backward's). Appends the reduce-scatters, the loss's all-reduce
// (with the guard's probe, when `guard` is set), the sharded updates and
// their all-gathers, and the update outputs. Adds the shard inputs, their
// tensors in `cap.persistent` (rank-local: never broadcast); lays `shards`
// out on the first call.
struct ShardedStep {
  ir::ValueId probe = ir::kNoValue;   // nonfinite_probe's value averaged over the ranks
  ir::ValueId norm = ir::kNoValue;    // the gradients' norm, when the step clips
  std::vector<ir::ValueId> replaced;  // the per-parameter state inputs the shards replace
};
ShardedStep append_sharded_step(CapturedStep& cap, const std::vector<optim::UpdateGroup>& groups,
                                const std::vector<ir::ValueId>& grads, int64_t bucket_bytes,
                                bool guard, OptimizerShards& shards);

// Puts the joint graph's input nodes first, in their order, without those
// in `drop` (which nothing reads) and their sources; the ranges of joint
// stages move with them. The shard inputs are built with the optimizer, so
// without this they would sit after the backward, where the single graph's
// order (partition/update_order.hpp) would not move the updates.
void inputs_first(CapturedStep& cap, const std::vector<ir::ValueId>& drop);

}  // namespace ws::step
