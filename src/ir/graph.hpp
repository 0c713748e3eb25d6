// The graph IR.
//
// A Graph is a list of Nodes in topological order. Each node produces exactly
// one value, so a node's index is its value id (SSA). A node has an op from
// ops.def, argument ids (always smaller than its own id), attributes, a result
// Type (dtype + static shape) and the user source location that made it.
//
// Semantics worth knowing:
//  - Elementwise ops take operands of one shape; broadcasting is explicit
//    (`broadcast`), which keeps kernels, fusion and VJP rules simple.
//  - Graph inputs are `input` nodes with a role and a name; parameters come
//    first, in named_parameters() order.
//  - Graph outputs carry a role and, for updates, the input value they
//    overwrite in place. That alias table is the whole in-place contract.
//  - A `fusion` node runs a small graph, its body, as one kernel: the body's
//    inputs are the node's operands in order, its outputs the node's results.
//    The node's own value is result 0; `fusion_result %f {index=i}` names
//    result i >= 1. Bodies are immutable once built and shared by copies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ir/op.hpp"
#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"

namespace ws::ir {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// The number of elements of `s` times `elem_size`, or nullopt when a
// dimension is negative or the product of the nonzero dimensions times
// `elem_size` does not fit in int64 (so that no partial product, stride or
// byte offset over the shape can overflow, even when a zero dimension
// leaves it empty): shapes from text or user attributes go through this
// before anything multiplies them.
std::optional<int64_t> checked_numel(const Shape& s, int64_t elem_size = 1);

struct Type {
  DType dtype = DType::f32;
  Shape shape;

  int64_t rank() const { return int64_t(shape.size()); }
  int64_t numel() const { return ws::numel(shape); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  std::string str() const;  // "f32[128,784]"
  friend bool operator==(const Type&, const Type&) = default;
};

// Attribute values: integers (also flags), floats, integer lists, strings,
// float lists (constant data).
using AttrValue =
    std::variant<int64_t, double, std::vector<int64_t>, std::string, std::vector<double>>;

// A small ordered map from attribute name to value, kept sorted by name so the
// printed form is canonical.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv);
  // From pairs already sorted by name, each name once (WS_CHECKed): a
  // parser sorts once instead of inserting one at a time.
  static Attrs from_sorted(std::vector<std::pair<std::string, AttrValue>> kv);

  void set(const std::string& name, AttrValue v);
  // The value of `name`, or nullptr. Code reads an attribute of known kind
  // through attr.hpp, checked against the op's schema when it compiles;
  // these untyped reads are for code that handles any attribute (printer,
  // verifier).
  const AttrValue* find(std::string_view name) const;  // binary search
  bool has(const std::string& name) const;
  const AttrValue& get(const std::string& name) const;  // WS_CHECKs presence

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return kv_; }
  bool empty() const { return kv_.empty(); }
  friend bool operator==(const Attrs&, const Attrs&) = default;

 private:
  std::vector<std::pair<std::string, AttrValue>> kv_;
};

enum class InputRole : uint8_t { param, buffer, opt_state, hyper, rng, data, saved, grad };
enum class OutputRole : uint8_t { loss, user, grad, saved, update };

const char* role_name(InputRole r);
const char* role_name(OutputRole r);
bool parse_role(std::string_view s, InputRole* out);
bool parse_role(std::string_view s, OutputRole* out);

struct Graph;

// The name of every fusion body (a body prints without one).
inline constexpr const char* kBodyName = "body";

// Which part of a training step computed a value: the traced forward (also
// a copy the backward recomputes, marked by its `recompute` attribute), the
// backward (autograd), or the optimizer's update. Capture marks the joint
// graph (partition::mark_stages, from its ranges); passes carry it with the
// node, as they carry its location, and a node that replaces others takes
// the stage of the one whose value it gives (a product with its update
// accumulated: the update's). Pictures of the step colour by it; it is not
// printed in the text form (a parsed node is forward).
enum class Stage : uint8_t { forward, backward, optimizer };
const char* stage_name(Stage s);  // "forward", "backward", "optimizer"

struct Node {
  Op op;
  std::vector<ValueId> args;
  Attrs attrs;
  Type type;
  SourceLoc loc;
  Stage stage = Stage::forward;
  std::shared_ptr<const Graph> body = nullptr;  // a fusion's ops; null for every other op
};

// An `input` node named `name` in `role` (the caller adds it to the graph
// and its inputs).
Node input_node(InputRole role, const std::string& name, Type t, SourceLoc loc = {},
                Stage stage = Stage::forward);

struct Output {
  OutputRole role;
  ValueId value;
  // For role `update`: the input node this output overwrites in place.
  ValueId aliased_input = kNoValue;
  std::string name;
  friend bool operator==(const Output&, const Output&) = default;
};

struct Graph {
  std::string name = "g";
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;  // ids of `input` nodes, in order
  std::vector<Output> outputs;

  const Node& node(ValueId v) const { return nodes.at(size_t(v)); }
  const Type& type(ValueId v) const { return node(v).type; }
  int64_t size() const { return int64_t(nodes.size()); }

  // Role and name of an input node.
  InputRole input_role(ValueId v) const;
  const std::string& input_name(ValueId v) const;
  // Position of an input node in `inputs`, or -1.
  int input_index(ValueId v) const;
  // Ids of inputs with this role, in order.
  std::vector<ValueId> inputs_with_role(InputRole r) const;
  // First output with this role, or nullptr.
  const Output* output_with_role(OutputRole r) const;
};

// Number of users of each value (graph outputs count as users).
std::vector<int> use_counts(const Graph& g);

// For passes that rebuild a graph: appends n to `out` with its operands
// renamed through `map` (old id -> new id) and returns its new id.
ValueId append_renamed(Graph& out, Node n, const std::vector<ValueId>& map);

// For passes that rebuild a graph: g's inputs and outputs, with every value
// renamed through `map` (old id -> new id), appended to `out`.
void copy_interface(const Graph& g, const std::vector<ValueId>& map, Graph& out);

}  // namespace ws::ir
