// The concrete half of ws::Tensor: storage, factories of given values, and
// reading values back. The operations, and everything that traces, are the
// capture layer's (capture/tensor.cpp); the interpreter (exec/) needs only
// this half, which is why it sits below exec.
#include "tensor/tensor_impl.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace ws {
namespace {
SourceLoc sl(const Loc& l) { return SourceLoc::from(l); }
}  // namespace

namespace detail {

Storage::Storage(size_t n) : data(nullptr), bytes(n) {
  size_t rounded = ((n + 63) / 64) * 64;
  data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!data) throw OutOfMemory(n, "a tensor");
  std::memset(data, 0, rounded == 0 ? 64 : rounded);
}

Storage::~Storage() {
  if (!borrowed) std::free(data);
}

Tensor borrow(void* data, const ir::Type& t, std::shared_ptr<void> owner) {
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(t.dtype) != 0)
    throw Error(
        fmt::format("borrowed memory for a {} tensor at {} is not aligned to its {}-byte elements; "
                    "bind a copy",
                    t.str(), data, dtype_size(t.dtype)));
  auto impl = std::make_shared<TensorImpl>();
  impl->type = t;
  impl->storage = std::make_shared<Storage>(data, t.bytes(), std::move(owner));
  return Tensor(std::move(impl));
}

const TensorImpl& impl_of(const Tensor& t, const char* what, const Loc& loc) {
  if (!t.defined()) throw Error(fmt::format("{}: the tensor is undefined{}", what, at(sl(loc))));
  return *t.impl();
}

const TensorImpl& concrete(const Tensor& t, const char* what, const Loc& loc) {
  const TensorImpl& impl = impl_of(t, what, loc);
  if (impl.tracer)
    throw Error(fmt::format(
        "{}: cannot read the value of traced tensor {}{}: while wholestep traces a function, "
        "tensors have a type but no values. Return the value from the function (the compiled "
        "step reports it) instead of reading it inside",
        what, impl.type.str(), at(sl(loc))));
  return impl;
}

// A shape a user hands a factory: no negative dimension, and a size in
// bytes that 64 bits count (so nothing after this multiplies into garbage).
const Shape& checked_shape(const Shape& shape, DType dtype, const char* fn) {
  for (int64_t d : shape)
    if (d < 0)
      throw Error(fmt::format("{}: shape {} has a negative dimension", fn, shape_str(shape)));
  if (!ir::checked_numel(shape, int64_t(dtype_size(dtype))))
    throw Error(
        fmt::format("{}: a {} tensor of shape {} is too large: its size in bytes does not "
                    "fit in 64 bits",
                    fn, dtype_name(dtype), shape_str(shape)));
  return shape;
}

}  // namespace detail

namespace {

using detail::checked_shape;
using detail::concrete;
using detail::impl_of;

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  return DType::b8;
}

template <class T>
Tensor from_values(const std::vector<T>& v, const Shape& shape) {
  checked_shape(shape, dtype_of<T>(), "Tensor::from_vector");
  if (int64_t(v.size()) != numel(shape))
    throw Error(fmt::format("Tensor::from_vector: {} values do not fill shape {} ({} elements)",
                            v.size(), shape_str(shape), numel(shape)));
  auto impl = detail::make_concrete(ir::Type{dtype_of<T>(), shape});
  if (!v.empty()) std::memcpy(impl->storage->data, v.data(), v.size() * sizeof(T));
  return Tensor(std::move(impl));
}

}  // namespace

bool Tensor::is_traced() const { return impl_ && impl_->tracer != nullptr; }
const Shape& Tensor::shape() const { return impl_of(*this, "shape", Loc::current()).type.shape; }
DType Tensor::dtype() const { return impl_of(*this, "dtype", Loc::current()).type.dtype; }
int64_t Tensor::size(int64_t d) const {
  int64_t r = dim();
  if (d < -r || d >= r) throw Error(fmt::format("size({}): tensor {} has {} dims", d, str(), r));
  return shape()[size_t(d < 0 ? d + r : d)];
}
std::string Tensor::str() const { return impl_ ? impl_->type.str() : "undefined"; }

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  return Tensor(
      detail::make_concrete(ir::Type{dtype, checked_shape(shape, dtype, "Tensor::empty")}));
}
Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  return empty(checked_shape(shape, dtype, "Tensor::zeros"), dtype);
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s) {
  return from_values(v, s);
}
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s) {
  return from_values(v, s);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s) {
  return from_values(v, s);
}

template <class T>
T* Tensor::data(Loc loc) {
  const detail::TensorImpl& impl = concrete(*this, "data()", loc);
  if (impl.type.dtype != dtype_of<T>())
    throw Error(fmt::format("data<{}>(): the tensor is {}{}", dtype_name(dtype_of<T>()),
                            impl.type.str(), at(sl(loc))));
  return static_cast<T*>(impl.storage->data);
}
template <class T>
const T* Tensor::data(Loc loc) const {
  return const_cast<Tensor*>(this)->data<T>(loc);
}
template float* Tensor::data<float>(Loc);
template double* Tensor::data<double>(Loc);
template int64_t* Tensor::data<int64_t>(Loc);
template uint8_t* Tensor::data<uint8_t>(Loc);
template const float* Tensor::data<float>(Loc) const;
template const double* Tensor::data<double>(Loc) const;
template const int64_t* Tensor::data<int64_t>(Loc) const;
template const uint8_t* Tensor::data<uint8_t>(Loc) const;

std::vector<double> Tensor::to_vector(Loc loc) const {
  const detail::TensorImpl& impl = concrete(*this, "to_vector()", loc);
  const int64_t n = impl.type.numel();
  std::vector<double> out(static_cast<size_t>(n));
  const void* p = impl.storage->data;
  for (int64_t i = 0; i < n; ++i) {
    switch (impl.type.dtype) {
      case DType::f32: out[size_t(i)] = static_cast<const float*>(p)[i]; break;
      case DType::f64: out[size_t(i)] = static_cast<const double*>(p)[i]; break;
      case DType::i64: out[size_t(i)] = double(static_cast<const int64_t*>(p)[i]); break;
      case DType::b8: out[size_t(i)] = static_cast<const uint8_t*>(p)[i]; break;
    }
  }
  return out;
}

double Tensor::item(Loc loc) const {
  const detail::TensorImpl& impl = concrete(*this, "item()", loc);
  if (impl.type.numel() != 1)
    throw Error(fmt::format("item(): tensor {} has {} elements, not one{}", impl.type.str(),
                            impl.type.numel(), at(sl(loc))));
  return to_vector(loc)[0];
}

Tensor Tensor::clone(Loc loc) const {
  const detail::TensorImpl& impl = concrete(*this, "clone()", loc);
  auto c = detail::make_concrete(impl.type);
  std::memcpy(c->storage->data, impl.storage->data, impl.type.bytes());
  return Tensor(std::move(c));
}

}  // namespace ws
