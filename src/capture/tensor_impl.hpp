// What a ws::Tensor handle points at: either concrete storage or a value of
// the graph being traced.
#pragma once

#include <memory>

#include "ir/graph.hpp"
#include "wholestep/tensor.hpp"

namespace ws::capture {
class Tracer;
}

namespace ws::detail {

// A 64-byte aligned, zero-initialized block. Its address never changes, so a
// compiled step can bind a parameter's storage once and update it in place.
struct Storage {
  explicit Storage(size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data;
  size_t bytes;
};

struct TensorImpl {
  ir::Type type;
  std::shared_ptr<Storage> storage;   // concrete tensors
  capture::Tracer* tracer = nullptr;  // traced tensors
  ir::ValueId value = ir::kNoValue;
};

inline std::shared_ptr<TensorImpl> make_concrete(const ir::Type& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->type = t;
  impl->storage = std::make_shared<Storage>(t.bytes());
  return impl;
}

// The counter-based random stream: a 0-d i64 seed and offset (numbers
// consumed so far). One per process, like PyTorch's default generator; their
// storage never moves, so compiled steps bind it as persistent state.
struct RngState {
  Tensor seed, offset;
};
RngState& rng_state();

}  // namespace ws::detail
