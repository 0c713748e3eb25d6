// The verifier: each structural rule, broken on purpose, is reported as an
// InternalError naming the node or output and the rule.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ir/attr.hpp"
#include "ir/attr_schema.hpp"
#include "ir/builder.hpp"
#include "ir/text.hpp"
#include "ir/verify.hpp"

#include "test_util.hpp"

namespace ws::ir {
namespace {

using testing::Contains;

// The message of the InternalError verify() throws, or "" (and a failure).
std::string VerifyError(const Graph& g) {
  try {
    verify(g);
  } catch (const InternalError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "verify threw something other than InternalError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "verify accepted an invalid graph";
  return "";
}

const Type kMat{DType::f32, {2, 3}};

// %0 = input param "w", %1 = input data "x", %2 = add %1, %0, %3 = neg %2.
Graph SmallGraph() {
  Graph g;
  Builder b(g);
  ValueId w = b.input(InputRole::param, "w", kMat);
  ValueId x = b.input(InputRole::data, "x", kMat);
  ValueId y = b.binary(Op::add, x, w);
  ValueId z = b.unary(Op::neg, y);
  g.outputs.push_back({OutputRole::user, z, kNoValue, "z"});
  return g;
}

TEST(IrVerify, AcceptsBuilderGraphs) {
  Graph g = SmallGraph();
  Builder b(g);
  ValueId s = b.reduce(Op::reduce_sum, 3, {0, 1});
  ValueId c = b.constant({1, 2, 3, 4, 5, 6}, kMat);
  ValueId u = b.binary(Op::sub, 0, c);
  g.outputs.push_back({OutputRole::loss, s, kNoValue, "loss"});
  g.outputs.push_back({OutputRole::update, u, 0, "w"});
  EXPECT_NO_THROW(verify(g));
  EXPECT_NO_THROW(verify(Graph{}));
}

// w and x, each reduced by its own collective (seq 0 and 1) and waited for.
Graph TwoCollectives() {
  Graph g = SmallGraph();
  Builder b(g);
  auto start = [&](ValueId v, int64_t seq) {
    return b.add(Op::all_reduce_start, {v},
                 make_attrs<Op::all_reduce_start>({{"reduce", std::string("sum")}, {"seq", seq}}));
  };
  ValueId s0 = start(0, 0), s1 = start(1, 1);  // %4, %5
  ValueId w0 = b.add(Op::wait, {s0}), w1 = b.add(Op::wait, {s1});
  g.outputs.push_back({OutputRole::user, w0, kNoValue, "w_sum"});
  g.outputs.push_back({OutputRole::user, w1, kNoValue, "x_sum"});
  return g;
}

TEST(IrVerify, CollectivesKeepTheirOrderAndOnlyTheirWaitReadsTheirBuffer) {
  EXPECT_NO_THROW(verify(TwoCollectives()));
  {
    Graph g = TwoCollectives();
    set_attr<Op::all_reduce_start, "seq">(g.nodes[5].attrs, 0);
    EXPECT_TRUE(Contains(VerifyError(g), "collective seq 0 follows seq 0"));
  }
  {
    Graph g = TwoCollectives();
    Builder(g).unary(Op::neg, 4);
    EXPECT_TRUE(Contains(VerifyError(g), "reads the buffer of collective %4 before a wait for it"));
  }
  {
    Graph g = TwoCollectives();
    Builder(g).add(Op::wait, {4});
    EXPECT_TRUE(Contains(VerifyError(g), "collective %4 is waited for twice"));
  }
  {
    Graph g = TwoCollectives();
    g.nodes[7].args = {6};  // the second wait waits for the first wait
    EXPECT_TRUE(Contains(VerifyError(g), "which is not a collective's start"));
  }
  {
    Graph g = TwoCollectives();
    g.outputs[1].value = 5;
    g.nodes.pop_back();
    g.nodes.pop_back();
    g.outputs.erase(g.outputs.begin() + 2);
    EXPECT_TRUE(Contains(VerifyError(g), "this collective is started but never waited for"));
  }
}

TEST(IrVerify, RejectsForwardReference) {
  Graph g = SmallGraph();
  g.nodes[2].args = {3, 0};
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%2 = add %3, %0"));
  EXPECT_TRUE(Contains(msg, "forward reference"));
}

TEST(IrVerify, RejectsSelfReferenceAndMissingOperand) {
  Graph g = SmallGraph();
  g.nodes[3].args = {3};
  EXPECT_TRUE(Contains(VerifyError(g), "uses itself"));
  g.nodes[3].args = {-4};
  EXPECT_TRUE(Contains(VerifyError(g), "operand %-4 does not exist"));
  g.nodes[3].args = {17};
  EXPECT_TRUE(Contains(VerifyError(g), "operand %17 does not exist"));
}

TEST(IrVerify, RejectsWrongType) {
  Graph g = SmallGraph();
  g.nodes[3].type = Type{DType::f64, {2, 3}};
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%3 = neg %2 : f64[2,3]"));
  EXPECT_TRUE(Contains(msg, "differs from the inferred type f32[2,3]"));
}

TEST(IrVerify, RejectsWrongArity) {
  Graph g = SmallGraph();
  g.nodes[2].args = {1};
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%2 = add %1"));
  EXPECT_TRUE(Contains(msg, "add takes 2 operands, got 1"));
  g = SmallGraph();
  g.nodes[0].args = {};
  g.nodes[1].args = {0};
  EXPECT_TRUE(Contains(VerifyError(g), "input takes 0 operands, got 1"));
}

// matmul_add's alpha and beta are 0-d; a beta of another shape is named.
TEST(IrVerify, RejectsAMatmulAddWhoseBetaIsNotAScalar) {
  Graph g = ir::parse(R"(graph g {
  %0 = input data "a" : f32[2,3]
  %1 = input data "b" : f32[3,4]
  %2 = input param "c" : f32[2,4]
  %3 = input hyper "alpha" : f32[]
  %4 = input hyper "beta" : f32[]
  %5 = matmul_add %0, %1, %2, %3, %4 : f32[2,4]
  out update %5 -> %2 "c"
}
)");
  verify(g);
  g.nodes[5].args[4] = 2;
  const std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "beta (the accumulator's scale) must be a 0-d f32, got f32[2,4]"));
}

TEST(IrVerify, ReportsOperandErrorsAsInternalErrorsNamingTheNode) {
  Graph g = SmallGraph();
  g.nodes[1].type = Type{DType::f32, {3}};
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%2 = add %1, %0"));
  EXPECT_TRUE(Contains(msg, "operand shapes differ"));
}

TEST(IrVerify, ReportsMissingAttributesNamingTheNode) {
  Graph g = SmallGraph();
  g.nodes.push_back(Node{Op::reduce_sum, {3}, {}, Type{DType::f32, {}}, {"m.cpp", 5}});
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%4 = reduce_sum %3 : f32[] (at m.cpp:5)"));
  EXPECT_TRUE(Contains(msg, "reduce_sum needs an integer list attribute 'axes'"));
}

// Every attribute is in its op's schema (ops.def), of the schema's kind.
TEST(IrVerify, RejectsAttributesOutsideTheOpsSchema) {
  Graph g = SmallGraph();
  g.nodes[3].attrs.set("axes", std::vector<int64_t>{0});
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%3 = neg %2"));
  EXPECT_TRUE(Contains(msg, "unknown attribute 'axes' (neg takes recompute)"));
  g = SmallGraph();
  Builder b(g);
  b.reduce(Op::reduce_sum, 3, {0});
  g.nodes.back().attrs.set("axis", int64_t(1));
  EXPECT_TRUE(
      Contains(VerifyError(g), "unknown attribute 'axis' (reduce_sum takes axes, recompute)"));
  g.nodes.back().attrs = Attrs{{"axes", int64_t(0)}};
  EXPECT_TRUE(Contains(VerifyError(g), "attribute 'axes' must be an integer list, got an integer"));
  g.nodes.back().attrs = Attrs{{"axes", std::vector<int64_t>{0}}, {"recompute", 1.0}};
  EXPECT_TRUE(Contains(VerifyError(g), "attribute 'recompute' must be an integer, got a float"));
  g.nodes.back().attrs = Attrs{{"axes", std::vector<int64_t>{0}}, {"recompute", int64_t(2)}};
  EXPECT_NO_THROW(verify(g));
}

TEST(IrVerify, EveryOpsSchemaParsesAndNamesEachAttributeOnce) {
  for (const OpInfo& info : kOpTable) {
    std::set<std::string_view> names;
    for (const AttrSpec& s : attr_schema(info.op)) {
      EXPECT_FALSE(s.name.empty()) << info.name;
      EXPECT_TRUE(names.insert(s.name).second) << info.name << " names " << s.name << " twice";
    }
    EXPECT_TRUE(names.count("recompute")) << info.name;
  }
}

TEST(IrVerify, RejectsTwoInputsOrTwoOutputsOfOneName) {
  Graph g = SmallGraph();
  g.nodes[1].attrs.set("name", std::string("w"));
  EXPECT_TRUE(Contains(VerifyError(g),
                       "%1 = input data \"w\" : f32[2,3]: input name \"w\" is "
                       "taken by %0 already"));
  g = SmallGraph();
  g.outputs.push_back({OutputRole::loss, 2, kNoValue, "z"});
  EXPECT_TRUE(Contains(VerifyError(g), "output 1 \"z\": the name is taken by output 0 already"));
  // An input and an output may share a name (an update names its parameter).
  g = SmallGraph();
  g.outputs.push_back({OutputRole::update, 3, 0, "w"});
  EXPECT_NO_THROW(verify(g));
}

// Sizes are counted in 64 bits without wrapping: a type whose bytes do not
// fit, and shape arithmetic that would overflow, are errors.
TEST(IrVerify, RejectsTypesAndGeometryThatOverflow) {
  const int64_t big = int64_t(1) << 62;
  Graph g = SmallGraph();
  g.nodes[0].type = Type{DType::f32, {big, 2}};
  EXPECT_TRUE(Contains(VerifyError(g), "the type is too large: its size in bytes does not fit"));
  g = SmallGraph();
  g.nodes[0].type = Type{DType::f32, {0, big, big}};  // empty, but its strides would overflow
  EXPECT_TRUE(Contains(VerifyError(g), "the type is too large"));
  g = SmallGraph();
  const Type empty{DType::f32, {0, big / 4}};  // empty, and 2^62 bytes of rows
  for (int v = 0; v < 4; ++v) g.nodes[size_t(v)].type = empty;
  EXPECT_NO_THROW(verify(g));
  g = SmallGraph();
  Builder b(g);
  ValueId r = b.reshape(3, {6});
  g.nodes[size_t(r)].attrs.set("shape", std::vector<int64_t>{big, 4, 3});
  EXPECT_TRUE(Contains(VerifyError(g), "more elements than 64 bits count"));
  g.nodes[size_t(r)].attrs.set("shape", std::vector<int64_t>{-2, -3});
  EXPECT_TRUE(Contains(VerifyError(g), "a negative dimension"));
}

TEST(IrVerify, ShapeInferenceReportsOverflowAsAUserError) {
  const int64_t big = int64_t(1) << 62;
  const Type x{DType::f32, {1, 1, 4, 4}}, w{DType::f32, {1, 1, 3, 3}};
  auto error = [](Op op, const std::vector<Type>& args, const Attrs& attrs) -> std::string {
    try {
      infer_type(op, args, attrs, SourceLoc{"net.cpp", 7});
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << op_name(op) << " inferred a type";
    return "";
  };
  EXPECT_TRUE(Contains(error(Op::conv2d, {x, w}, Attrs{{"padding", std::vector<int64_t>{big}}}),
                       "conv2d: the kernel geometry overflows 64 bits (2 x 4611686018427387904) "
                       "(at net.cpp:7)"));
  EXPECT_TRUE(Contains(error(Op::conv2d, {x, w}, Attrs{{"dilation", std::vector<int64_t>{big, 1}}}),
                       "the kernel geometry overflows 64 bits"));
  EXPECT_TRUE(Contains(error(Op::conv2d, {x, Type{DType::f32, {1, 1, 0, 3}}}, {}),
                       "the kernel window must be at least 1 wide, got 0"));
  EXPECT_TRUE(Contains(
      error(Op::max_pool2d, {x},
            Attrs{{"kernel", std::vector<int64_t>{2}}, {"padding", std::vector<int64_t>{big}}}),
      "padding (4611686018427387904, 4611686018427387904) must be at most half"));
  EXPECT_TRUE(
      Contains(error(Op::conv2d, {Type{DType::f32, {1, 0, 4, 4}}, Type{DType::f32, {0, 4, 3, 3}}},
                     Attrs{{"groups", big}}),
               "expects 4 per group x 4611686018427387904 groups"));
  const Type wide{DType::f32, {big}};
  EXPECT_TRUE(Contains(error(Op::concat, {wide, wide}, Attrs{{"axis", int64_t(0)}}),
                       "concat: the concatenated size overflows 64 bits"));
  EXPECT_TRUE(Contains(error(Op::one_hot, {Type{DType::i64, {4}}},
                             Attrs{{"dtype", std::string("f32")}, {"num_classes", big}}),
                       "one_hot: the result f32[4,4611686018427387904] is too large"));
  EXPECT_TRUE(
      Contains(error(Op::broadcast, {Type{DType::f32, {1}}},
                     Attrs{{"dims", std::vector<int64_t>{0}}, {"shape", std::vector<int64_t>{-1}}}),
               "the result f32[-1] has a negative dimension"));
}

TEST(IrVerify, RejectsUpdateAliasingANonInput) {
  Graph g = SmallGraph();
  g.outputs.push_back({OutputRole::update, 3, 2, "w"});
  EXPECT_TRUE(Contains(VerifyError(g), "aliases %2, which is not an input node"));
  g.outputs.back().aliased_input = 99;
  EXPECT_TRUE(Contains(VerifyError(g), "aliases %99, which is not an input node"));
  g.outputs.back().aliased_input = kNoValue;
  EXPECT_TRUE(Contains(VerifyError(g), "names no aliased input"));
}

TEST(IrVerify, RejectsAliasTypeMismatch) {
  Graph g = SmallGraph();
  Builder b(g);
  ValueId s = b.reduce(Op::reduce_sum, 3, {0});
  g.outputs.push_back({OutputRole::update, s, 0, "w"});
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "has type f32[3] but aliases input %0 of type f32[2,3]"));
}

TEST(IrVerify, RejectsTwoUpdatesAliasingOneInput) {
  Graph g = SmallGraph();
  g.outputs.push_back({OutputRole::update, 3, 0, "w"});
  g.outputs.push_back({OutputRole::update, 2, 0, "w again"});
  EXPECT_TRUE(Contains(VerifyError(g), "both update input %0"));
}

TEST(IrVerify, RejectsAliasOnANonUpdateOutput) {
  Graph g = SmallGraph();
  g.outputs[0].aliased_input = 0;
  EXPECT_TRUE(Contains(VerifyError(g), "only update outputs alias inputs"));
}

TEST(IrVerify, RejectsOutputOfAMissingValue) {
  Graph g = SmallGraph();
  g.outputs.push_back({OutputRole::loss, 4, kNoValue, "loss"});
  EXPECT_TRUE(Contains(VerifyError(g), "refers to a value that does not exist"));
}

TEST(IrVerify, RejectsInputNodeMissingFromInputsList) {
  Graph g = SmallGraph();
  g.inputs = {0};
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%1 = input data \"x\" : f32[2,3]"));
  EXPECT_TRUE(Contains(msg, "missing from the graph's inputs list"));
}

TEST(IrVerify, RejectsBadInputsList) {
  Graph g = SmallGraph();
  g.inputs = {0, 1, 2};
  EXPECT_TRUE(Contains(VerifyError(g), "inputs[2] = %2 is not an input node"));
  g.inputs = {0, 1, 0};
  EXPECT_TRUE(Contains(VerifyError(g), "input %0 is listed twice"));
  g.inputs = {1, 0};
  EXPECT_NO_THROW(verify(g));
}

TEST(IrVerify, RejectsInputWithoutRoleOrName) {
  Graph g = SmallGraph();
  g.nodes[1].attrs.set("role", std::string("weights"));
  EXPECT_TRUE(Contains(VerifyError(g), "known input role"));
  g = SmallGraph();
  g.nodes[1].attrs = Attrs{{"role", std::string("data")}};
  EXPECT_TRUE(Contains(VerifyError(g), "'name'"));
}

TEST(IrVerify, RejectsMalformedSources) {
  Graph g = SmallGraph();
  Builder b(g);
  b.constant({1, 2}, Type{DType::f32, {2}});
  g.nodes.back().type = Type{DType::f32, {3}};
  EXPECT_TRUE(Contains(VerifyError(g), "constant has 2 values for 3 elements"));
  g = SmallGraph();
  g.nodes.push_back(Node{Op::full, {}, Attrs{{"value", int64_t(1)}}, Type{}, {}});
  EXPECT_TRUE(Contains(VerifyError(g), "attribute 'value' must be a float, got an integer"));
  g = SmallGraph();
  g.nodes[0].type = Type{DType::f32, {-1, 3}};
  EXPECT_TRUE(Contains(VerifyError(g), "negative dimension"));
}

TEST(IrVerify, MessagesNameTheGraph) {
  Graph g = SmallGraph();
  g.name = "train_step";
  g.nodes[3].type = Type{};
  EXPECT_TRUE(Contains(VerifyError(g), "invalid graph 'train_step'"));
}

TEST(IrVerify, EnabledFlagCanBeToggled) {
  EXPECT_TRUE(verify_enabled());  // test_main turns it on
  set_verify_enabled(false);
  EXPECT_FALSE(verify_enabled());
  set_verify_enabled(true);
  EXPECT_TRUE(verify_enabled());
}

}  // namespace
}  // namespace ws::ir

namespace ws::ir {
namespace {

// Fusions: a small fused graph, then each rule broken on purpose. The parser
// does not verify bodies on its own; parse() runs verify(), which does.
Graph FusedGraph() {
  Graph g;
  Builder b(g);
  ValueId x = b.input(InputRole::data, "x", kMat);
  auto body = std::make_shared<Graph>();
  body->name = kBodyName;
  Builder bb(*body);
  ValueId a = bb.input(InputRole::data, "a0", kMat);
  ValueId e = bb.add(Op::exp, {a});
  ValueId n = bb.add(Op::neg, {e});
  body->outputs.push_back({OutputRole::user, e, kNoValue, "r0"});
  body->outputs.push_back({OutputRole::user, n, kNoValue, "r1"});
  g.nodes.push_back(
      Node{Op::fusion, {x}, Attrs{{"kind", std::string("loop")}}, kMat, {}, Stage::forward, body});
  g.nodes.push_back(Node{
      Op::fusion_result, {1}, Attrs{{"index", int64_t(1)}}, kMat, {}, Stage::forward, nullptr});
  g.outputs.push_back({OutputRole::user, 2, kNoValue, "y"});
  return g;
}

TEST(IrVerify, AcceptsAFusionWithAnExtraResult) { verify(FusedGraph()); }

TEST(IrVerify, RejectsAFusionWhoseBodyInputsDifferFromItsOperands) {
  Graph g = FusedGraph();
  auto body = std::make_shared<Graph>(*g.nodes[1].body);
  body->nodes[0].type = Type{DType::f32, {3, 2}};
  g.nodes[1].body = body;
  std::string msg = VerifyError(g);
  EXPECT_TRUE(Contains(msg, "%1 = fusion %0"));
  EXPECT_TRUE(Contains(msg, "its body is invalid"));  // exp of f32[3,2] is not f32[2,3]
}

TEST(IrVerify, RejectsAFusionResultOutsideTheBodysResults) {
  Graph g = FusedGraph();
  g.nodes[2].attrs.set("index", int64_t(2));
  EXPECT_TRUE(Contains(VerifyError(g), "'index' in [1, 2)"));
  g.nodes[2].attrs.set("index", int64_t(1));
  g.nodes[2].args = {0};
  EXPECT_TRUE(Contains(VerifyError(g), "the operand of fusion_result must be a fusion"));
}

TEST(IrVerify, RejectsALoopBodyHoldingAReduction) {
  Graph g = FusedGraph();
  auto body = std::make_shared<Graph>(*g.nodes[1].body);
  Builder bb(*body);
  ValueId r = bb.add(Op::reduce_sum, {0}, Attrs{{"axes", std::vector<int64_t>{1}}});
  body->outputs.push_back({OutputRole::user, r, kNoValue, "r2"});
  g.nodes[1].body = body;
  EXPECT_TRUE(Contains(VerifyError(g), "body node %3 is a reduce_sum"));
}

TEST(IrVerify, RejectsABodyOnAnyOtherOp) {
  Graph g = FusedGraph();
  g.nodes.push_back(Node{Op::neg, {2}, {}, kMat, {}, Stage::forward, g.nodes[1].body});
  EXPECT_TRUE(Contains(VerifyError(g), "only a fusion has a body"));
}

}  // namespace
}  // namespace ws::ir

namespace ws::ir {
namespace {

// A product fusion (a weight's gradient and its SGD update in one kernel),
// then each of its rules broken on purpose.
Graph ProductGraph() {
  return parse(R"(graph g {
  %0 = input param "w" : f32[4,32]
  %1 = input hyper "lr" : f32[]
  %2 = input data "x" : f32[8,32]
  %3 = input data "dy" : f32[8,4]
  %4 = fusion %3, %2, %1, %0 {kind="product"} : f32[4,32] {
    %0 = input data "a0" : f32[8,4]
    %1 = input data "a1" : f32[8,32]
    %2 = matmul %0, %1 {transpose_a=1} : f32[4,32]
    %3 = input data "a2" : f32[]
    %4 = input data "a3" : f32[4,32]
    %5 = broadcast %3 {dims=[], shape=[4,32]} : f32[4,32]
    %6 = mul %2, %5 : f32[4,32]
    %7 = sub %4, %6 : f32[4,32]
    out user %7 "r0"
  }
  out update %4 -> %0 "w"
})");
}

TEST(IrVerify, AcceptsAProductFusion) { verify(ProductGraph()); }

TEST(IrVerify, RejectsAProductBodyWhoseLoopReadsTheProductsOperands) {
  Graph g = ProductGraph();
  auto body = std::make_shared<Graph>(*g.nodes[4].body);
  Builder bb(*body);
  const ValueId r = bb.add(Op::neg, {1});
  body->outputs.push_back({OutputRole::user, r, kNoValue, "r1"});
  g.nodes[4].body = body;
  EXPECT_TRUE(Contains(VerifyError(g), "body node %8 reads an operand of the product"))
      << VerifyError(g);
}

TEST(IrVerify, RejectsAProductBodyWhoseProductIsNotOfItsFirstTwoInputs) {
  // The same body with its inputs listed x, dy: the product is dy @ x.
  Graph g = ProductGraph();
  auto body = std::make_shared<Graph>(*g.nodes[4].body);
  body->inputs = {1, 0, 3, 4};
  g.nodes[4].body = body;
  g.nodes[4].args = {2, 3, 1, 0};
  EXPECT_TRUE(Contains(VerifyError(g), "starts with a matmul of its first two inputs"))
      << VerifyError(g);
}

TEST(IrVerify, RejectsAProductBodyReadingARowThroughABroadcast) {
  Graph g = ProductGraph();
  auto body = std::make_shared<Graph>(*g.nodes[4].body);
  body->nodes[3].type = Type{DType::f32, {32}};
  body->nodes[5].attrs.set("dims", std::vector<int64_t>{1});
  g.nodes[4].body = body;
  g.nodes[1].type = Type{DType::f32, {32}};
  EXPECT_TRUE(Contains(VerifyError(g), "broadcasts of one-element inputs")) << VerifyError(g);
}

TEST(IrVerify, RejectsAnUnknownFusionKind) {
  Graph g = ProductGraph();
  g.nodes[4].attrs.set("kind", std::string("products"));
  EXPECT_TRUE(Contains(VerifyError(g), "\"loop\", \"reduce\" or \"product\"")) << VerifyError(g);
}

}  // namespace
}  // namespace ws::ir
