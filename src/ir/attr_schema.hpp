// The attribute schema of every op, read from the last column of ops.def.
//
// An op's attributes are part of its meaning: a kernel reads `stride`, the
// printer prints whatever is there. A misspelt or stray attribute would be
// carried along silently and a missing one found only by the kernel that
// needs it, so the verifier checks every node's attributes against the
// schema: each known, of the right kind, every required one present.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ir/graph.hpp"

namespace ws::ir {

enum class AttrKind : uint8_t { int_, float_, ints, floats, string };

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required;
};

// Attributes any op may carry, beside its own: `recompute=N` marks the N-th
// clone the partitioner made of a value to compute again, so that CSE keeps
// it apart from the original.
inline constexpr std::string_view kCommonAttrs = "recompute?:int";

// The op's own attributes followed by the common ones, in the order written.
std::span<const AttrSpec> attr_schema(Op op);

AttrKind attr_kind(const AttrValue& v);
// "an integer", "a float", "an integer list", "a float list", "a string".
const char* attr_kind_name(AttrKind k);

// An empty string when `attrs` fits the op's schema, else what is wrong,
// naming the attribute: "unknown attribute 'strides' (conv2d takes stride,
// padding, dilation, groups, recompute)".
std::string check_attrs(Op op, const Attrs& attrs);

}  // namespace ws::ir
