// A random training step for the differential tester (difftest.cpp): a
// model written as a list of ops over a pool of values, each op reading
// earlier values and, where it has them, parameters of its own. The list is
// all there is: a spec builds the same model (parameters drawn from its
// seed, op by op) in any dtype, prints as text and parses back, and shrinks
// by dropping ops or shrinking the input, so a failing case reduces to a
// small file that replays.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <wholestep/wholestep.hpp>

namespace ws::difftest {

// What one op computes, over values a (and b) of the pool.
enum class OpKind : int {
  unary,      // an elementwise function of a (arg: which)
  binary,     // a op b, b broadcast to a (arg: which)
  reduce,     // sum, mean or max of a over axes (arg: which; axes), keepdim or not
  normalize,  // a - reduce(a) (broadcast after a reduction; arg: which; axes)
  // conv2d of a with a weight [+ bias] (ints: out, kh, kw, stride, pad, dil,
  // groups, bias[, the width's padding when it differs])
  conv,
  pool,            // max or avg pool of a (ints: max, kh, kw, stride, pad)
  linear,          // a @ W [+ b] over a's last dim (ints: out, bias)
  batch_norm,      // training-mode BatchNorm of a [N,C,H,W] with affine and running stats
  layer_norm,      // LayerNorm over a's last dim
  channel_affine,  // a * w + b with w, b per channel (dim 1)
  transpose,       // a's dims permuted (ints: the permutation)
  reshape,         // a's adjacent dims i, i+1 merged (ints: i)
  slice,           // a[start:end] along an axis (ints: axis, start, end)
  concat,          // a and b joined along an axis (ints: axis)
  softmax,         // softmax over the last dim
  dropout,         // dropout with p (ints: p in percent)
  select,          // where(a > b, a, c * a) (arg: c in tenths)
  cross_entropy,   // cross-entropy of a [N, C] against fixed labels (a 0-d value)
  embed,           // rows of a table [V, D] at fixed indices, one per row of a, plus a's rows
  // h <- tanh(h @ W) + a, `steps` times from h = a, one weight W [D, D] for
  // every step, as a recurrent network's (ints: steps)
  recurrent,
};

struct OpSpec {
  OpKind kind = OpKind::unary;
  int a = 0, b = -1;          // operand values (0: the input)
  int which = 0;              // the function, for unary, binary, reduce, normalize
  std::vector<int64_t> ints;  // the op's other integers (see OpKind)
};

enum class OptKind : int { sgd, adam, adamw };

struct Spec {
  uint64_t seed = 0;
  Shape input;  // the data argument's shape
  std::vector<OpSpec> ops;
  OptKind opt = OptKind::sgd;
  bool momentum = false, nesterov = false, weight_decay = false, amsgrad = false;
  bool clip = false;  // global-norm gradient clipping
  int nonfinite = 2;  // 0 error, 1 skip, 2 ignore
  double memory_budget = 0;

  std::string str() const;  // the text parse() reads
};

Spec parse_spec(const std::string& text);

// A random spec of up to `max_ops` ops: each op is tried eagerly on a
// random input and kept only if the library accepts it.
Spec generate(uint64_t seed, int max_ops);

// Smaller specs than s, most promising first: each op removed (its
// readers read its first operand instead where the shapes allow), each
// extent of the input shrunk.
std::vector<Spec> shrink_candidates(const Spec& s);

// The model of a spec in one dtype: its parameters and buffers are made
// while forward() first runs (each op's own, drawn from the spec's seed and
// the op's place), so build it with make_model.
class SpecModel : public nn::Module {
 public:
  SpecModel(const Spec& spec, DType dtype);
  // Every value of the pool; the loss reads the values no op reads.
  std::vector<Tensor> values(const Tensor& x);
  Tensor loss(const Tensor& x);
  const Spec& spec() const { return spec_; }

 private:
  friend Spec generate(uint64_t seed, int max_ops);
  friend std::unique_ptr<SpecModel> make_model(const Spec& spec, DType dtype);
  Tensor param(size_t op, int slot, const Shape& shape, double bound, bool one = false);
  Tensor buffer(size_t op, int slot, const Shape& shape, double value);
  Tensor apply(size_t i, const std::vector<Tensor>& v);
  Spec spec_;
  DType dtype_;
  bool building_ = true;
  std::vector<std::vector<Tensor>> params_, buffers_;  // per op, per slot
};

// The model with its parameters made (one eager forward on zeros).
std::unique_ptr<SpecModel> make_model(const Spec& spec, DType dtype);

// The data argument of a spec: normal values from `seed`.
Tensor make_input(const Spec& spec, uint64_t seed, DType dtype);

}  // namespace ws::difftest
