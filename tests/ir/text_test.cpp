// The text form of graphs: printing, parsing, exact round trips, parse errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/attr.hpp"
#include "ir/builder.hpp"
#include "ir/text.hpp"
#include "test_util.hpp"

namespace ws::ir {
namespace {

using testing::Contains;

// Doubles compare by bit pattern, so -0.0 differs from 0.0 and nan equals nan.
bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool SameAttrValue(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a)) return SameBits(*x, std::get<double>(b));
  if (const auto* x = std::get_if<std::vector<double>>(&a)) {
    const auto& y = std::get<std::vector<double>>(b);
    if (x->size() != y.size()) return false;
    for (size_t i = 0; i < x->size(); ++i)
      if (!SameBits((*x)[i], y[i])) return false;
    return true;
  }
  return a == b;
}

// Field-for-field equality of two graphs, with a message naming the field.
void ExpectSameGraph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node &x = a.nodes[i], &y = b.nodes[i];
    EXPECT_EQ(op_name(x.op), op_name(y.op)) << "node " << i;
    EXPECT_EQ(x.args, y.args) << "node " << i;
    EXPECT_EQ(x.type, y.type) << "node " << i;
    EXPECT_EQ(x.loc, y.loc) << "node " << i;
    ASSERT_EQ(x.attrs.items().size(), y.attrs.items().size()) << "node " << i;
    for (size_t k = 0; k < x.attrs.items().size(); ++k) {
      EXPECT_EQ(x.attrs.items()[k].first, y.attrs.items()[k].first) << "node " << i;
      EXPECT_TRUE(SameAttrValue(x.attrs.items()[k].second, y.attrs.items()[k].second))
          << "node " << i << " attribute " << x.attrs.items()[k].first;
    }
  }
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
}

// One step of a tiny linear model with an SGD update, touching most syntax.
Graph ModelGraph() {
  Graph g;
  g.name = "model";
  Builder b(g);
  ValueId w = b.input(InputRole::param, "fc.weight", Type{DType::f32, {4, 3}}, {"model.cpp", 3});
  ValueId bias = b.input(InputRole::param, "fc.bias", Type{DType::f32, {4}});
  ValueId mom = b.input(InputRole::opt_state, "fc.weight.momentum", Type{DType::f32, {4, 3}});
  ValueId lr = b.input(InputRole::hyper, "lr", Type{DType::f32, {}});
  ValueId x = b.input(InputRole::data, "x", Type{DType::f32, {2, 3}});
  ValueId labels = b.input(InputRole::data, "labels", Type{DType::i64, {2}});
  b.loc = {"model.cpp", 10};
  ValueId h = b.matmul(x, w, false, true);
  ValueId z = b.binary(Op::add, h, b.broadcast_to(bias, {2, 4}));
  b.loc = {};
  ValueId onehot = b.add(Op::one_hot, {labels},
                         Attrs{{"dtype", std::string("f32")}, {"num_classes", int64_t(4)}});
  ValueId s = b.reduce(Op::reduce_sum, b.binary(Op::mul, z, onehot), {0, 1});
  ValueId loss = b.binary(Op::mul, s, b.scalar(-0.5));
  ValueId table = b.constant({0.1, -2.5, 1e-05, 3.0}, Type{DType::f32, {4}});
  ValueId wide = b.convert(table, DType::f64);
  ValueId step = b.scale(mom, lr);
  b.loc = {"optim/sgd.cpp", 42};
  ValueId new_w = b.binary(Op::sub, w, step);
  g.outputs.push_back({OutputRole::loss, loss, kNoValue, "loss"});
  g.outputs.push_back({OutputRole::user, wide, kNoValue, "table"});
  g.outputs.push_back({OutputRole::update, new_w, w, "fc.weight"});
  return g;
}

TEST(IrText, PrintsTheDocumentedFormat) {
  Graph g;
  g.name = "tiny";
  Builder b(g);
  ValueId w = b.input(InputRole::param, "w", Type{DType::f32, {3, 2}});
  ValueId x = b.input(InputRole::data, "x \"in\"\n", Type{DType::f32, {4, 2}});
  b.loc = {"dir\\tiny.cpp", 7};
  ValueId y = b.matmul(x, w, false, true);
  b.loc = {};
  ValueId sum = b.reduce(Op::reduce_sum, y, {0, 1});
  ValueId loss = b.binary(Op::mul, sum, b.scalar(0.5));
  ValueId k = b.convert(b.constant({1.0, -2.5}, Type{DType::f32, {2}}), DType::f64);
  ValueId mask = b.binary(Op::gt, w, w);
  ValueId new_w = b.scale(w, b.scalar(2.0));
  g.outputs = {{OutputRole::loss, loss, kNoValue, "loss"},
               {OutputRole::user, k, kNoValue, "k"},
               {OutputRole::user, mask, kNoValue, "mask"},
               {OutputRole::update, new_w, w, "w"}};
  const std::string expected = R"(graph tiny {
  %0 = input param "w" : f32[3,2]
  %1 = input data "x \"in\"\n" : f32[4,2]
  %2 = matmul %1, %0 {transpose_b=1} : f32[4,3] @ "dir\\tiny.cpp":7
  %3 = reduce_sum %2 {axes=[0,1]} : f32[]
  %4 = full {value=0.5} : f32[]
  %5 = mul %3, %4 : f32[]
  %6 = constant {value=f64[1.0,-2.5]} : f32[2]
  %7 = convert %6 {dtype="f64"} : f64[2]
  %8 = gt %0, %0 : bool[3,2]
  %9 = full {value=2.0} : f32[]
  %10 = broadcast %9 {dims=[], shape=[3,2]} : f32[3,2]
  %11 = mul %0, %10 : f32[3,2]
  out loss %5 "loss"
  out user %7 "k"
  out user %8 "mask"
  out update %11 -> %0 "w"
}
)";
  EXPECT_EQ(print(g), expected);
  ExpectSameGraph(parse(expected), g);
}

TEST(IrText, RoundTripKeepsLocationsAndAttrKinds) {
  Graph g = ModelGraph();
  std::string text = print(g);
  Graph back = parse(text);
  ExpectSameGraph(back, g);
  EXPECT_EQ(print(back), text);
  EXPECT_TRUE(Contains(text, "@ \"optim/sgd.cpp\":42"));
  EXPECT_TRUE(Contains(text, "input opt_state \"fc.weight.momentum\" : f32[4,3]"));
  EXPECT_TRUE(Contains(text, "one_hot %5 {dtype=\"f32\", num_classes=4} : f32[2,4]"));
  EXPECT_TRUE(Contains(text, "{value=f64[0.1,-2.5,1e-05,3.0]}"));
}

TEST(IrText, PrintWithoutLocationsDropsOnlyLocations) {
  Graph g = ModelGraph();
  std::string text = print(g, PrintOptions{.locations = false});
  EXPECT_EQ(text.find('@'), std::string::npos) << text;
  for (Node& n : g.nodes) n.loc = {};
  ExpectSameGraph(parse(text), g);
  EXPECT_EQ(print(g), text);
}

// Each attribute kind, with its edge values, on ops whose schema takes it.
TEST(IrText, RoundTripKeepsEveryAttrKind) {
  Graph g;
  Builder b(g);
  ValueId x = b.input(InputRole::data, "a \"b\" \\ c\nd", Type{DType::f32, {2, 3}});
  ValueId w = b.input(InputRole::param, "w", Type{DType::f32, {3, 3}});
  ValueId bias = b.constant({1.0, 0.5, 2.0}, Type{DType::f32, {3}});
  b.add(Op::matmul_bias, {x, w, bias},
        Attrs{{"activation", std::string()},
              {"recompute", int64_t(-9223372036854775807LL - 1)},
              {"transpose_b", int64_t(1)}});
  b.add(Op::reduce_sum, {x}, Attrs{{"axes", std::vector<int64_t>{-1, 0}}});
  b.add(Op::reduce_sum, {x}, Attrs{{"axes", std::vector<int64_t>{}}});
  b.constant({}, Type{DType::f32, {0}});
  b.full(1.0, Type{DType::f32, {}});
  std::string text = print(g);
  for (const char* part : {"input data \"a \\\"b\\\" \\\\ c\\nd\"", "{value=f64[1.0,0.5,2.0]}",
                           "{activation=\"\", recompute=-9223372036854775808, transpose_b=1}",
                           "{axes=[-1,0]}", "{axes=[]}", "{value=f64[]}", "{value=1.0}"})
    EXPECT_TRUE(Contains(text, part));
  ExpectSameGraph(parse(text), g);
}

TEST(IrText, DoublesRoundTripExactly) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<double, std::string>> cases = {
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {1e300, "1e+300"},
      {inf, "inf"},
      {-inf, "-inf"},
      {1.0, "1.0"},
      {-3.0, "-3.0"},
      {5e-324, "5e-324"},
      {1.0 / 3, "0.3333333333333333"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {123456789.0, "123456789.0"}};
  Graph g;
  Builder b(g);
  for (const auto& c : cases) b.scalar(c.first);
  b.constant({0.1, -0.0, inf}, Type{DType::f64, {3}});
  std::string text = print(g);
  for (const auto& [value, expected] : cases)
    EXPECT_TRUE(Contains(text, "{value=" + expected + "}"));
  ExpectSameGraph(parse(text), g);
}

TEST(IrText, NanRoundTrips) {
  Graph g;
  Builder b(g);
  b.scalar(std::numeric_limits<double>::quiet_NaN());
  Graph back = parse(print(g));
  ASSERT_EQ(back.size(), 1);
  EXPECT_TRUE(std::isnan(ir::attr<Op::full, "value">(back.nodes[0])));
}

// A comment runs from '#' outside a string to the end of the line, on a
// line of its own or after a node; a '#' in a string is the string's.
TEST(IrText, SkipsComments) {
  const std::string plain =
      "graph g {\n"
      "  %0 = input data \"x#1\" : f32[2]\n"
      "  %1 = exp %0 : f32[2]\n"
      "  out user %1 \"y\"\n"
      "}\n";
  const std::string commented =
      "# what the graph is for\n"
      "graph g {\n"
      "  # the input\n"
      "  %0 = input data \"x#1\" : f32[2]\n"
      "  %1 = exp %0 : f32[2]  # one op\n"
      "  out user %1 \"y\"\n"
      "}\n";
  EXPECT_EQ(print(parse(commented)), plain);
}

TEST(IrText, QuotesGraphNamesThatAreNotIdentifiers) {
  Graph g;
  g.name = "step 1";
  EXPECT_EQ(print(g), "graph \"step 1\" {\n}\n");
  EXPECT_EQ(parse(print(g)).name, "step 1");
}

TEST(IrText, SpellsOutAnInputListThatIsNotInNodeOrder) {
  Graph g;
  Builder b(g);
  ValueId a = b.input(InputRole::param, "a", Type{DType::f32, {2}});
  ValueId c = b.input(InputRole::data, "c", Type{DType::f32, {2}});
  g.inputs = {c, a};
  std::string text = print(g);
  EXPECT_TRUE(Contains(text, "  inputs %1, %0\n"));
  ExpectSameGraph(parse(text), g);
  g.inputs = {a, c};
  EXPECT_FALSE(Contains(print(g), "inputs"));
}

TEST(IrText, ParseAcceptsBlankLinesAndCrLf) {
  Graph g = parse("\ngraph g {\r\n\n  %0 = input data \"x\" : f32[2]\r\n  out user %0 \"y\"\n}");
  ASSERT_EQ(g.size(), 1);
  EXPECT_EQ(g.inputs, std::vector<ValueId>{0});
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0].name, "y");
}

struct BadText {
  std::string text;
  int line;
  const char* what;
};

TEST(IrText, ParseErrorsNameTheLine) {
  const std::string head = "graph g {\n  %0 = input data \"x\" : f32[2]\n";
  const std::vector<BadText> cases = {
      {"", 1, "expected 'graph'"},
      {"hello world", 1, "expected 'graph'"},
      {"graph g\n}\n", 1, "expected '{'"},
      {"graph g {\n  %0 = frobnicate : f32[]\n}\n", 2, "unknown op 'frobnicate'"},
      {"graph g {\n  %1 = full {value=1.0} : f32[]\n}\n", 2, "expected node %0"},
      {"graph g {\n  %0 = neg %1 : f32[]\n}\n", 2, "%1 used as an operand is not defined yet"},
      {"graph g {\n  %0 = input data \"x : f32[2]\n}\n", 2, "unterminated string"},
      {"graph g {\n  %0 = input data \"x\\t\" : f32[2]\n}\n", 2, "unknown escape"},
      {"graph g {\n  %0 = input weights \"x\" : f32[2]\n}\n", 2, "unknown input role 'weights'"},
      {head + "  %1 = neg %0 f32[2]\n}\n", 3, "expected ':' before the type, got 'f32'"},
      {head + "  %1 = neg %0 {a=1} f32[2]\n}\n", 3, "expected ':' after attributes"},
      {head + "  %1 = neg %0 : f16[2]\n}\n", 3, "unknown dtype 'f16'"},
      {head + "  %1 = neg %0 : f32[2\n}\n", 3, "expected ']'"},
      {head + "  %1 = neg %0 {a=99999999999999999999} : f32[2]\n}\n", 3, "out of range"},
      {head + "  %1 = neg %0 {a=1.2.3} : f32[2]\n}\n", 3, "malformed number"},
      {head + "  %1 = neg %0 {a=1, a=2} : f32[2]\n}\n", 3, "duplicate attribute"},
      {head + "  %1 = neg %0 {a=} : f32[2]\n}\n", 3, "expected an attribute value"},
      {head + "  %1 = neg %0 {a=[1.5]} : f32[2]\n}\n", 3, "expected an integer"},
      {head + "  %1 = neg %0 : f32[2] @ \"f.cpp\"\n}\n", 3, "expected ':'"},
      {head + "  %1 = neg %0 : f32[2] extra\n}\n", 3, "expected end of line"},
      {head + "  %1 = neg % : f32[2]\n}\n", 3, "expected a value number"},
      {head + "  $\n}\n", 3, "unexpected character '$'"},
      {head + "  out result %0 \"y\"\n}\n", 3, "unknown output role"},
      {head + "  out user %5 \"y\"\n}\n", 3, "%5 used as an output is not defined"},
      {head + "  out user %0\n}\n", 3, "expected a quoted output name"},
      {head + "  out user %0 \"y\"\n  %1 = neg %0 : f32[2]\n}\n", 4, "expected an 'out' line"},
      {head + "  out user %0 \"y\"\n", 4, "got end of input"},
      {head + "}\ngraph h {\n", 4, "expected end of input after '}'"},
  };
  for (const BadText& c : cases) {
    try {
      parse(c.text);
      ADD_FAILURE() << "parsed without error:\n" << c.text;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_TRUE(Contains(msg, "parse error at line " + std::to_string(c.line) + ":")) << c.text;
      EXPECT_TRUE(Contains(msg, c.what)) << c.text;
    }
  }
}

// What the verifier finds in parsed text is a ws::Error naming the node:
// attributes outside the op's schema, names used twice, sizes that do not
// fit in 64 bits.
TEST(IrText, ParseRejectsWhatTheVerifierRejects) {
  const std::string head = "graph g {\n  %0 = input data \"x\" : f32[2]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + "  %1 = neg %0 {a=1} : f32[2]\n}\n",
       "%1 = neg %0 : f32[2]: unknown attribute 'a' (neg takes recompute)"},
      {head + "  %1 = reduce_sum %0 {axes=0} : f32[]\n}\n",
       "attribute 'axes' must be an integer list, got an integer"},
      {head + "  %1 = reduce_sum %0 : f32[]\n}\n",
       "reduce_sum needs an integer list attribute 'axes'"},
      {head + "  %1 = input data \"x\" : f32[2]\n}\n", "input name \"x\" is taken by %0"},
      {head + "  out user %0 \"y\"\n  out loss %0 \"y\"\n}\n",
       "output 1 \"y\": the name is taken by output 0 already"},
      {"graph g {\n  %0 = input data \"x\" : f32[4611686018427387904,4]\n}\n",
       "the type is too large: its size in bytes does not fit in 64 bits"},
      {head + "  %1 = reshape %0 {shape=[1152921504606846976,0]} : f32[1152921504606846976,0]\n}\n",
       "cannot reshape f32[2] (2 elements) to [1152921504606846976,0] (0 elements)"},
      {head + "  %1 = reshape %0 {shape=[4611686018427387904,4,2]} : f32[2]\n}\n",
       "more elements than 64 bits count"},
      {"graph g {\n  %0 = input data \"x\" : f32[1,1,4,4]\n  %1 = max_pool2d %0 "
       "{kernel=[2], padding=[4611686018427387904]} : f32[1,1,2,2]\n}\n",
       "must be at most half the kernel"},
      {"graph g {\n  %0 = input data \"x\" : f32[1,1,4,4]\n  %1 = avg_pool2d %0 "
       "{kernel=[1], stride=[1], padding=[0], count_include_pad=1, extra=2} : f32[1,1,4,4]\n}\n",
       "unknown attribute 'extra' (avg_pool2d takes kernel, stride, padding, count_include_pad, "
       "recompute)"},
  };
  for (const auto& [text, what] : cases) {
    try {
      parse(text);
      ADD_FAILURE() << "parsed without error:\n" << text;
    } catch (const Error& e) {
      EXPECT_TRUE(Contains(e.what(), "parsed graph is invalid: ")) << text;
      EXPECT_TRUE(Contains(e.what(), what)) << text;
    }
  }
}

// Attributes are sorted once per node, not inserted one at a time: a node
// with 100,000 of them parses (the verifier then names the first unknown
// one), and a repeated name is found wherever it stands.
TEST(IrText, ManyAttributesParseAndARepeatedOneIsFound) {
  std::string attrs;
  for (int i = 0; i < 100000; ++i) attrs += fmt::format("k{}={}, ", 99999 - i, i);
  const std::string head = "graph g {\n  %0 = input data \"x\" : f32[2]\n  %1 = neg %0 {";
  try {
    parse(head + attrs + "k5=1} : f32[2]\n}\n");
    ADD_FAILURE() << "parsed a repeated attribute";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "parse error at line 3: duplicate attribute 'k5'")) << e.what();
  }
  try {
    parse(head + attrs + "z=1} : f32[2]\n}\n");
    ADD_FAILURE() << "parsed unknown attributes";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "unknown attribute 'k0' (neg takes recompute)")) << e.what();
  }
  // An input's role and name count as attributes too.
  EXPECT_THROW(parse("graph g {\n  %0 = input data \"x\" {name=\"y\"} : f32[2]\n}\n"), Error);
}

TEST(IrText, ParseRunsTheVerifier) {
  const char* text =
      "graph g {\n"
      "  %0 = input data \"x\" : f32[2]\n"
      "  %1 = neg %0 : f32[3]\n"
      "}\n";
  try {
    parse(text);
    ADD_FAILURE() << "parsed an ill-typed graph";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "parsed graph is invalid: "));
    EXPECT_TRUE(Contains(e.what(), "%1 = neg %0 : f32[3]"));
  }
}

// Every truncation and many single-character edits of a valid text either
// parse or throw ws::Error: never another exception, never a crash.
TEST(IrText, ParseSurvivesMutatedText) {
  const std::string text = print(ModelGraph());
  auto try_parse = [](const std::string& t) {
    try {
      parse(t);
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected exception " << e.what() << " for:\n" << t;
    }
  };
  for (size_t n = 0; n < text.size(); ++n) try_parse(text.substr(0, n));
  const std::string replacements = "%9\"\\{],:\n";
  for (size_t i = 0; i < text.size(); ++i) {
    for (char r : replacements) {
      std::string t = text;
      t[i] = r;
      try_parse(t);
    }
    try_parse(text.substr(0, i) + text.substr(i + 1));
  }
}

}  // namespace
}  // namespace ws::ir

namespace ws::ir {
namespace {

TEST(IrText, FusionBodiesPrintNestedAndRoundTrip) {
  const char* text = R"(graph g {
  %0 = input data "x" : f32[2,3]
  %1 = input data "b" : f32[3]
  %2 = fusion %0, %1 {kind="loop"} : f32[2,3] @ "m.cpp":7 {
    %0 = input data "a0" : f32[2,3]
    %1 = input data "a1" : f32[3]
    %2 = broadcast %1 {dims=[1], shape=[2,3]} : f32[2,3]
    %3 = add %0, %2 : f32[2,3]
    %4 = tanh %3 : f32[2,3]
    out user %4 "r0"
    out user %3 "r1"
  }
  %3 = fusion_result %2 {index=1} : f32[2,3]
  out user %2 "y"
  out user %3 "z"
}
)";
  const Graph g = parse(text);
  EXPECT_EQ(print(g), text);
  ASSERT_TRUE(g.nodes[2].body);
  EXPECT_EQ(g.nodes[2].body->outputs.size(), 2u);
}

TEST(IrText, ABodyOnAnythingButAFusionIsAParseError) {
  const std::string msg = ws::testing::error_of([] {
    parse("graph g {\n  %0 = input data \"x\" : f32[2]\n  %1 = neg %0 : f32[2] {\n  }\n}\n");
  });
  EXPECT_NE(msg.find("line 3: only a fusion has a body, not neg"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ws::ir
