// Typed attribute access (ir/attr.hpp): reads give the schema's kind and,
// for optional attributes, its default; names outside an op's schema and
// values of another kind do not compile (checked below with static_assert).
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "ir/attr.hpp"

namespace ws::ir {
namespace {

using Ints = std::vector<int64_t>;

template <OpSet ops, AttrName name>
constexpr bool kReadable = requires(const Attrs& a) {
  attr<ops, name>(a);
};

template <OpSet ops, AttrName name, class V>
constexpr bool kWritable = requires(Attrs& a, V v) {
  set_attr<ops, name>(a, v);
};

template <OpSet ops, AttrName name>
using Read = decltype(attr<ops, name>(std::declval<const Attrs&>()));

// Misspelt names, names of another op and sets that disagree do not compile.
static_assert(kReadable<Op::conv2d, "groups">);
static_assert(!kReadable<Op::conv2d, "group">);
static_assert(!kReadable<Op::conv2d, "kernel">);           // a pooling's
static_assert(!kReadable<kPoolOps, "count_include_pad">);  // max pools have none
static_assert(kReadable<OpSet{Op::avg_pool2d, Op::avg_pool2d_grad}, "count_include_pad">);
static_assert(!kReadable<OpSet{Op::conv2d, Op::max_pool2d}, "stride">);  // defaults differ
static_assert(!kReadable<OpSet{Op::full, Op::constant}, "value">);       // kinds differ
static_assert(kReadable<kAllOps, "recompute">);

// The result is the schema's kind: value, reference, or pointer when
// optional without a default.
static_assert(std::is_same_v<Read<Op::conv2d, "groups">, int64_t>);
static_assert(std::is_same_v<Read<kConvOps, "stride">, const Ints&>);
static_assert(std::is_same_v<Read<kPoolOps, "stride">, const Ints*>);
static_assert(std::is_same_v<Read<Op::full, "value">, double>);
static_assert(std::is_same_v<Read<Op::constant, "value">, const std::vector<double>&>);
static_assert(std::is_same_v<Read<Op::convert, "dtype">, const std::string&>);
static_assert(std::is_same_v<Read<Op::matmul_bias, "activation">, const std::string*>);
static_assert(!std::is_convertible_v<Read<Op::conv2d, "groups">, std::string>);
static_assert(!std::is_convertible_v<Read<Op::convert, "dtype">, int64_t>);

// Writers take the schema's kind.
static_assert(kWritable<Op::convert, "dtype", std::string>);
static_assert(!kWritable<Op::convert, "dtype", int64_t>);
static_assert(!kWritable<Op::slice, "axis", std::string>);
static_assert(!kWritable<Op::slice, "axes", int64_t>);

TEST(IrAttr, ReadsRequiredAttributes) {
  const Attrs a = make_attrs<Op::slice>({{"axis", 1}, {"start", 2}, {"end", 5}});
  EXPECT_EQ((attr<Op::slice, "axis">(a)), 1);
  EXPECT_EQ((attr<Op::slice, "start">(a)), 2);
  EXPECT_EQ((attr<Op::slice, "end">(a)), 5);
  const Attrs b = make_attrs<Op::broadcast>({{"dims", Ints{1}}, {"shape", Ints{4, 3}}});
  EXPECT_EQ((attr<Op::broadcast, "dims">(b)), Ints{1});
  EXPECT_EQ((attr<Op::broadcast, "shape">(b)), (Ints{4, 3}));
  const Attrs c = make_attrs<Op::constant>({{"value", std::vector<double>{0.5, 2}}});
  EXPECT_EQ((attr<Op::constant, "value">(c)), (std::vector<double>{0.5, 2}));
  const Attrs full = make_attrs<Op::full>({{"value", 1.5}});
  EXPECT_EQ((attr<Op::full, "value">(full)), 1.5);
  const Attrs convert = make_attrs<Op::convert>({{"dtype", std::string("f64")}});
  EXPECT_EQ((attr<Op::convert, "dtype">(convert)), "f64");
}

// Absent optional attributes read as their ops.def defaults; present ones
// as themselves.
TEST(IrAttr, OptionalAttributesDefaultAsTheSchemaSays) {
  const Attrs none;
  EXPECT_EQ((attr<Op::conv2d, "groups">(none)), 1);
  EXPECT_EQ((attr<Op::conv2d, "stride">(none)), Ints{1});
  EXPECT_EQ((attr<Op::conv2d, "padding">(none)), Ints{0});
  EXPECT_EQ((attr<Op::conv2d, "dilation">(none)), Ints{1});
  EXPECT_EQ((attr<kConvOps, "dilation">(none)), Ints{1});
  EXPECT_EQ((attr<kPoolOps, "padding">(none)), Ints{0});
  EXPECT_EQ((attr<Op::avg_pool2d, "count_include_pad">(none)), 1);
  EXPECT_EQ((attr<kMatmulOps, "transpose_a">(none)), 0);
  EXPECT_EQ((attr<Op::matmul, "transpose_b">(none)), 0);
  EXPECT_EQ((attr<Op::random_uniform, "skip">(none)), 0);
  EXPECT_EQ((attr<kPoolOps, "stride">(none)), nullptr);  // the kernel's (geometry.hpp)
  EXPECT_EQ((attr<Op::matmul_bias, "activation">(none)), nullptr);
  EXPECT_EQ((attr<kAllOps, "recompute">(none)), nullptr);

  const Attrs some = make_attrs<Op::conv2d>({{"groups", 4}, {"stride", Ints{2, 1}}});
  EXPECT_EQ((attr<Op::conv2d, "groups">(some)), 4);
  EXPECT_EQ((attr<Op::conv2d, "stride">(some)), (Ints{2, 1}));
  EXPECT_EQ((attr<Op::conv2d, "padding">(some)), Ints{0});
  Attrs pool = make_attrs<Op::max_pool2d>({{"kernel", Ints{3}}, {"stride", Ints{2}}});
  ASSERT_NE((attr<kPoolOps, "stride">(pool)), nullptr);
  EXPECT_EQ((*attr<kPoolOps, "stride">(pool)), Ints{2});
  Attrs product;
  set_attr<Op::matmul_bias, "activation">(product, "relu");
  set_attr<Op::matmul_bias, "transpose_b">(product, 1);
  ASSERT_NE((attr<Op::matmul_bias, "activation">(product)), nullptr);
  EXPECT_EQ((*attr<Op::matmul_bias, "activation">(product)), "relu");
  EXPECT_EQ((attr<kMatmulOps, "transpose_b">(product)), 1);
  EXPECT_EQ((attr<kMatmulOps, "transpose_a">(product)), 0);
}

// Every default in ops.def reads as the value its text writes.
TEST(IrAttr, EveryDefaultInTheSchemaParses) {
  int defaults = 0;
  for (const OpInfo& info : kOpTable)
    for (const AttrSpec& s : attr_schema(info.op)) {
      if (s.default_text.empty()) continue;
      ++defaults;
      EXPECT_FALSE(s.required) << info.name << " " << s.name;
      if (s.kind == AttrKind::int_)
        EXPECT_EQ(std::to_string(schema_detail::parse_int(s.default_text)), s.default_text);
      else
        EXPECT_EQ(s.kind, AttrKind::ints) << info.name << " " << s.name;
    }
  EXPECT_GT(defaults, 0);
}

// Attributes the schema checks when the code runs: a node outside the ops
// named, a value of another kind (the verifier rejects both in graphs it
// checks), a missing required one.
TEST(IrAttr, MisusesFoundWhenTheCodeRunsAreInternalErrors) {
  Node n{Op::max_pool2d, {}, make_attrs<Op::max_pool2d>({{"kernel", Ints{2}}}), {}, {}};
  EXPECT_EQ((attr<kPoolOps, "kernel">(n)), Ints{2});
  EXPECT_THROW((attr<kConvOps, "stride">(n)), InternalError);
  n.attrs.set("kernel", int64_t(2));
  EXPECT_THROW((attr<kPoolOps, "kernel">(n)), InternalError);
  EXPECT_THROW((attr<Op::slice, "axis">(Attrs{})), InternalError);
  EXPECT_THROW(make_attrs<Op::slice>({{"axis", 1.0}}), InternalError);
}

}  // namespace
}  // namespace ws::ir
