// append_backward appends to the graph it reads, so the graph's node vector
// grows (and moves) in the middle of a VJP rule. A rule that holds a
// reference into the nodes across an append then reads a moved-from node:
// vjp_broadcast did, and tiny_mlp with weight decay (one more hyperparameter
// input, so the vector filled up exactly at the cross-entropy's broadcast)
// failed with "reshape: cannot reshape f32[32] to []". These tests make the
// vector grow at every append of the backward of real models and expect the
// same joint graph each time.
#include <gtest/gtest.h>

#include "autograd/reverse.hpp"
#include "ir/builder.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"
#include "step/capture_step.hpp"
#include "wholestep/models.hpp"
#include "wholestep/wholestep.hpp"

namespace ws {
namespace {

// `g` with room for exactly `room` more nodes, so the node vector grows at
// the append after that. False when the standard library reserves more.
bool with_room(ir::Graph& g, size_t room) {
  std::vector<ir::Node> nodes;
  nodes.reserve(g.nodes.size() + room);
  nodes.insert(nodes.end(), g.nodes.begin(), g.nodes.end());
  g.nodes = std::move(nodes);
  return g.nodes.capacity() == g.nodes.size() + room;
}

std::string backward_of(ir::Graph& g) {
  autograd::append_backward(g, g.outputs[0].value, g.inputs_with_role(ir::InputRole::param));
  ir::verify(g);
  return ir::print(g);
}

// The backward of `forward` with the node vector growing at every one of its
// appends gives the graph made without growing.
void expect_same_backward_wherever_the_nodes_grow(const ir::Graph& forward) {
  ir::Graph roomy = forward;
  roomy.nodes.reserve(forward.nodes.size() * 16);
  const std::string expected = backward_of(roomy);
  const size_t appended = ir::parse(expected).nodes.size() - forward.nodes.size();
  ASSERT_GT(appended, 0u);
  for (size_t room = 0; room < appended; ++room) {
    ir::Graph g = forward;
    if (!with_room(g, room)) GTEST_SKIP() << "reserve() gave more room than asked";
    std::string got;
    try {
      got = backward_of(g);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "with the nodes growing at backward append " << room << ": " << e.what();
      continue;
    }
    EXPECT_EQ(got, expected) << "with the nodes growing at backward append " << room;
  }
}

ir::Graph traced_forward(const std::string& name, int64_t batch) {
  manual_seed(1);
  models::Spec spec = models::spec(name);
  spec.batch = batch;
  spec.gpt = {.vocab = 16, .context = 4, .d_model = 8, .heads = 2, .layers = 1};
  auto model = models::make(spec);
  std::vector<ir::Type> types;
  for (const Tensor& t : models::random_batch(spec, 1)) types.push_back({t.dtype(), t.shape()});
  if (spec.data == models::DataKind::text)  // shorter than the context: a slice of pos
    for (ir::Type& t : types) t.shape[1] = spec.gpt.context - 1;
  return step::trace_forward(*model, nullptr, models::loss_fn(*model), types, {}).joint.graph;
}

TEST(AppendBackward, SameGraphWhereverTheNodesGrow) {
  for (const char* name : {"mlp", "tiny_mlp", "cnn", "gpt"}) {
    SCOPED_TRACE(name);
    expect_same_backward_wherever_the_nodes_grow(traced_forward(name, 2));
  }
}

// A rule that builds a node whose operands do not fit is a bug in
// wholestep, not the user's mistake, even though the node carries the
// user's line.
TEST(AppendBackward, AnInvalidNodeFromARuleIsAnInternalError) {
  ir::Graph g;
  ir::Builder b(g);
  b.internal = "autograd";
  const ir::ValueId x = b.input(ir::InputRole::param, "x", ir::Type{DType::f32, {32}});
  b.loc = SourceLoc{"model.cpp", 7};
  try {
    b.reshape(x, {});
    ADD_FAILURE() << "expected an InternalError";
  } catch (const InternalError& e) {
    EXPECT_STREQ(e.what(),
                 "autograd made an invalid node: reshape: cannot reshape f32[32] (32 elements) to "
                 "[] (1 elements) (at model.cpp:7)");
  }
  b.internal = nullptr;  // the user's traced code: a ws::Error
  EXPECT_THROW(b.reshape(x, {}), Error);
}

}  // namespace
}  // namespace ws
