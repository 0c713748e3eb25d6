// What a ws::Tensor handle points at: either concrete storage or a value of
// the graph being traced. The tensor layer sits between ir and exec: the
// interpreter makes and reads concrete tensors; tracing is capture's.
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
// Or another library's memory, borrowed: kept alive by `owner` and never
// freed here (a frontend binds its framework's tensors without copies). Our
// kernels assume only the alignment of an element (borrow checks it) and
// never read or write past `bytes`, so borrowed memory needs neither the
// alignment nor the padding of our own (tests/step/borrowed_storage_test).
struct Storage {
  explicit Storage(size_t bytes);
  Storage(void* borrowed, size_t bytes, std::shared_ptr<void> owner)
      : data(borrowed), bytes(bytes), borrowed(true), owner(std::move(owner)) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data;
  size_t bytes;
  bool borrowed = false;
  // Borrowed memory: what keeps it alive (none for memory the caller keeps
  // alive while the tensor is in use, a step's data arguments).
  std::shared_ptr<void> owner;
};

struct TensorImpl {
  ir::Type type;
  std::shared_ptr<Storage> storage;   // concrete tensors
  capture::Tracer* tracer = nullptr;  // traced tensors
  ir::ValueId value = ir::kNoValue;
  // An optimizer's state tensor whose values a ZeRO step keeps sharded
  // over the ranks (step/zero.hpp): empty until gathered.
  bool sharded = false;
};

inline std::shared_ptr<TensorImpl> make_concrete(const ir::Type& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->type = t;
  impl->storage = std::make_shared<Storage>(t.bytes());
  return impl;
}

// A tensor of type `t` over memory another library owns (`owner` keeps it
// alive, or the caller does). `data` must be aligned to an element, as any typed access
// is in C++ (a torch tensor's always is, unless made from a raw buffer at an
// odd offset); a ws::Error otherwise.
Tensor borrow(void* data, const ir::Type& t, std::shared_ptr<void> owner);

// The public API's checks, with its messages: `t` is defined (and, for
// concrete(), not traced), or a ws::Error naming `what` and the user's line.
const TensorImpl& impl_of(const Tensor& t, const char* what, const Loc& loc);
const TensorImpl& concrete(const Tensor& t, const char* what, const Loc& loc);
// A shape a user hands a factory named `fn`: no negative dimension, and a
// size in bytes that 64 bits count.
const Shape& checked_shape(const Shape& shape, DType dtype, const char* fn);

}  // namespace ws::detail
