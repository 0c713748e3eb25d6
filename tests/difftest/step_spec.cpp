// Random step specs: the text form, the generator, the shrinker and the
// model a spec describes (step_spec.hpp).
#include "step_spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

namespace ws::difftest {
namespace {

const char* kKindNames[] = {"unary",     "binary",  "reduce",        "normalize",  "conv",
                            "pool",      "linear",  "batch_norm",    "layer_norm", "channel_affine",
                            "transpose", "reshape", "slice",         "concat",     "softmax",
                            "dropout",   "select",  "cross_entropy", "embed",      "recurrent"};
constexpr int kKinds = int(sizeof kKindNames / sizeof kKindNames[0]);
constexpr int kUnaries = 27, kBinaries = 6;
const char* kOptNames[] = {"sgd", "adam", "adamw"};

// Values drawn for a parameter or an input: doubles rounded to float first,
// so the f32 and f64 models start from the same numbers.
Tensor draw(uint64_t seed, const Shape& shape, double lo, double hi, bool normal, DType dtype) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> v(size_t(ws::numel(shape)));
  for (double& x : v) x = double(float(normal ? n(rng) : u(rng)));
  Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::f64 ? t : cast(t, dtype);
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E5Full + (a << 6) + (a >> 2));
  h ^= h >> 31;
  return h * 0xBF58476D1CE4E5B9ull;
}

Tensor unary(int which, const Tensor& a) {
  switch (which) {
    case 0: return relu(a);
    case 1: return tanh(a);
    case 2: return sigmoid(a);
    case 3: return nn::gelu(a, false);
    case 4: return exp(tanh(a));
    case 5: return sqrt(add(sigmoid(a), 0.1));
    case 6: return rsqrt(add(mul(a, a), 1.0));
    case 7: return log(add(sigmoid(a), 0.5));
    case 8: return neg(a);
    case 9: return erf(a);
    case 10: return maximum(a, mul(a, 0.1));  // leaky relu
    case 11: return nn::elu(a, 0.7, 1.2);
    case 12: return nn::softplus(a, 2.0, 5.0);
    case 13: return nn::hardswish(mul(a, 4.0));
    case 14: return nn::mish(a);
    case 15: return nn::leaky_relu(a, 0.2);
    case 16: return sin(mul(a, 3.0));
    case 17: return cos(a);
    case 18: return tan(mul(tanh(a), 1.2));
    case 19: return asin(mul(tanh(a), 0.9));
    case 20: return acos(mul(tanh(a), 0.9));
    case 21: return atan(mul(a, 2.0));
    case 22: return sinh(a);
    case 23: return cosh(a);
    case 24: return asinh(mul(a, 3.0));
    case 25: return acosh(add(mul(a, a), 1.1));
    default: return atanh(mul(tanh(a), 0.9));
  }
}

Tensor binary(int which, const Tensor& a, const Tensor& b) {
  switch (which) {
    case 0: return add(a, b);
    case 1: return sub(a, b);
    case 2: return mul(a, b);
    case 3: return div(a, add(mul(b, b), 1.0));
    case 4: return maximum(a, b);
    default: return atan2(a, add(mul(b, b), 0.5));  // the abscissa kept from 0
  }
}

// b broadcasts to a's shape (numpy rules), giving a's shape.
bool broadcasts_to(const Shape& b, const Shape& a) {
  if (b.size() > a.size()) return false;
  for (size_t i = 0; i < b.size(); ++i) {
    const int64_t bd = b[b.size() - 1 - i], ad = a[a.size() - 1 - i];
    if (bd != ad && bd != 1) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- text

std::string Spec::str() const {
  std::string s = fmt::format("seed {}\ninput", seed);
  for (int64_t d : input) s += fmt::format(" {}", d);
  s += fmt::format(
      "\nopt {} momentum {} nesterov {} weight_decay {} amsgrad {} clip {} nonfinite {} "
      "budget {}\n",
      kOptNames[int(opt)], int(momentum), int(nesterov), int(weight_decay), int(amsgrad), int(clip),
      nonfinite, memory_budget);
  for (const OpSpec& o : ops) {
    s += fmt::format("op {} a {} b {} which {} ints", kKindNames[int(o.kind)], o.a, o.b, o.which);
    for (int64_t i : o.ints) s += fmt::format(" {}", i);
    s += "\n";
  }
  return s;
}

Spec parse_spec(const std::string& text) {
  Spec s;
  std::istringstream in(text);
  std::string line;
  auto fail = [&](const std::string& why) {
    throw Error(fmt::format("difftest spec: {} in line '{}'", why, line));
  };
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream l(line);
    std::string word;
    l >> word;
    if (word == "seed") {
      l >> s.seed;
    } else if (word == "input") {
      int64_t d;
      while (l >> d) s.input.push_back(d);
    } else if (word == "opt") {
      std::string name, key;
      l >> name;
      const auto* it = std::find(std::begin(kOptNames), std::end(kOptNames), name);
      if (it == std::end(kOptNames)) fail("unknown optimizer");
      s.opt = OptKind(it - std::begin(kOptNames));
      int m, n, w, a, c;
      l >> key >> m >> key >> n >> key >> w >> key >> a >> key >> c >> key >> s.nonfinite >> key >>
          s.memory_budget;
      s.momentum = m, s.nesterov = n, s.weight_decay = w, s.amsgrad = a, s.clip = c;
    } else if (word == "op") {
      OpSpec o;
      std::string kind, key;
      l >> kind;
      const auto* it = std::find_if(std::begin(kKindNames), std::end(kKindNames),
                                    [&](const char* k) { return kind == k; });
      if (it == std::end(kKindNames)) fail("unknown op");
      o.kind = OpKind(it - std::begin(kKindNames));
      l >> key >> o.a >> key >> o.b >> key >> o.which >> key;
      int64_t i;
      while (l >> i) o.ints.push_back(i);
      s.ops.push_back(o);
    } else {
      fail("unknown word '" + word + "'");
    }
    if (l.fail() && !l.eof()) fail("unreadable numbers");
  }
  if (s.input.empty()) throw Error("difftest spec: no input shape");
  return s;
}

// ---------------------------------------------------------------- the model

SpecModel::SpecModel(const Spec& spec, DType dtype) : spec_(spec), dtype_(dtype) {}

Tensor SpecModel::param(size_t op, int slot, const Shape& shape, double bound, bool one) {
  if (params_.size() <= op) params_.resize(op + 1);
  std::vector<Tensor>& ps = params_[op];
  if (size_t(slot) < ps.size()) return ps[size_t(slot)];
  WS_CHECK(building_ && size_t(slot) == ps.size()) << "difftest: a parameter made after building";
  Tensor t = draw(mix(mix(spec_.seed, op), uint64_t(slot)), shape, -bound, bound, false, dtype_);
  if (one) t = add(t, 1.0);
  ps.push_back(register_parameter(fmt::format("op{}_p{}", op, slot), t));
  return ps.back();
}

Tensor SpecModel::buffer(size_t op, int slot, const Shape& shape, double value) {
  if (buffers_.size() <= op) buffers_.resize(op + 1);
  std::vector<Tensor>& bs = buffers_[op];
  if (size_t(slot) < bs.size()) return bs[size_t(slot)];
  WS_CHECK(building_ && size_t(slot) == bs.size()) << "difftest: a buffer made after building";
  bs.push_back(
      register_buffer(fmt::format("op{}_b{}", op, slot), Tensor::full(shape, value, dtype_)));
  return bs.back();
}

Tensor SpecModel::apply(size_t i, const std::vector<Tensor>& v) {
  const OpSpec& o = spec_.ops[i];
  auto val = [&](int k) -> const Tensor& {
    if (k < 0 || size_t(k) >= v.size()) throw Error(fmt::format("op {} reads value {}", i, k));
    return v[size_t(k)];
  };
  const Tensor& a = val(o.a);
  const Shape& s = a.shape();
  const int64_t rank = int64_t(s.size());
  auto need = [&](bool ok, const char* what) {
    if (!ok) throw Error(fmt::format("op {}: {}", i, what));
  };
  auto ints = [&](size_t n) {
    need(o.ints.size() >= n, "too few integers");
    return o.ints;
  };
  auto axes_of = [&](size_t from) {
    std::vector<int64_t> axes(o.ints.begin() + int64_t(from), o.ints.end());
    need(!axes.empty(), "no axes");
    for (int64_t x : axes) need(x >= 0 && x < rank, "axis out of range");
    return axes;
  };
  switch (o.kind) {
    case OpKind::unary: return unary(o.which, a);
    case OpKind::binary: {
      const Tensor& b = val(o.b);
      need(broadcasts_to(b.shape(), s), "b does not broadcast to a");
      return binary(o.which, a, b);
    }
    case OpKind::reduce: {
      const bool keep = ints(2)[0] != 0;
      std::vector<int64_t> axes = axes_of(1);
      Tensor r = o.which == 0 ? sum(a, axes) : o.which == 1 ? mean(a, axes) : max(a, axes);
      if (!keep) return r;
      Shape k = s;
      for (int64_t x : axes) k[size_t(x)] = 1;
      return reshape(r, k);
    }
    case OpKind::normalize: {
      std::vector<int64_t> axes = axes_of(0);
      Shape k = s;
      for (int64_t x : axes) k[size_t(x)] = 1;
      if (o.which == 3) return nn::center(a, axes);
      if (o.which == 4) return nn::var(a, axes, 1, /*keepdim=*/true);
      Tensor r = o.which == 2 ? max(a, axes) : mean(a, axes);
      return sub(a, reshape(r, k));
    }
    case OpKind::conv: {
      const std::vector<int64_t> c = ints(8);
      need(rank == 4 || rank == 5, "conv of a value not 4-d or 5-d");
      need(c[6] > 0 && s[1] % c[6] == 0 && c[0] % c[6] == 0, "groups");
      const int64_t pw = c.size() > 8 ? c[8] : c[4];
      if (rank == 5) {  // a kh x kh x kw kernel: depth as height
        const double bound = 1.0 / std::sqrt(double(s[1] / c[6] * c[1] * c[1] * c[2]));
        Tensor w = param(i, 0, {c[0], s[1] / c[6], c[1], c[1], c[2]}, bound);
        Conv3dOptions opts{{c[3], c[3], c[3]}, {c[4], c[4], pw}, {c[5], c[5], c[5]}, c[6]};
        Tensor y = conv3d(a, w, opts);
        if (c[7]) y = add(y, reshape(param(i, 1, {c[0]}, bound), {1, c[0], 1, 1, 1}));
        return y;
      }
      const double bound = 1.0 / std::sqrt(double(s[1] / c[6] * c[1] * c[2]));
      Tensor w = param(i, 0, {c[0], s[1] / c[6], c[1], c[2]}, bound);
      Conv2dOptions opts{{c[3], c[3]}, {c[4], pw}, {c[5], c[5]}, c[6]};
      Tensor y = conv2d(a, w, opts);
      if (c[7]) y = add(y, reshape(param(i, 1, {c[0]}, bound), {1, c[0], 1, 1}));
      return y;
    }
    case OpKind::pool: {
      const std::vector<int64_t> p = ints(5);
      need(rank == 4, "pool of a non-4-d value");
      return p[0] ? max_pool2d(a, {p[1], p[2]}, {p[3], p[3]}, {p[4], p[4]})
                  : avg_pool2d(a, {p[1], p[2]}, {p[3], p[3]}, {p[4], p[4]}, p[4] % 2 == 0);
    }
    case OpKind::linear: {
      const std::vector<int64_t> l = ints(2);
      need(rank >= 1, "linear of a 0-d value");
      const int64_t d = s.back();
      const double bound = 1.0 / std::sqrt(double(d));
      Tensor w = param(i, 0, {d, l[0]}, bound);
      Shape out = s;
      out.back() = l[0];
      Tensor y = reshape(matmul(reshape(a, {a.numel() / d, d}), w), out);
      if (l[1]) y = add(y, param(i, 1, {l[0]}, bound));
      return y;
    }
    case OpKind::recurrent: {
      need(rank >= 1, "recurrent of a 0-d value");
      const int64_t d = s.back(), steps = ints(1)[0];
      need(steps >= 1 && steps <= 64, "recurrent steps out of [1, 64]");
      Tensor w = param(i, 0, {d, d}, 1.0 / std::sqrt(double(d)));
      const Tensor x = reshape(a, {a.numel() / d, d});
      Tensor h = x;
      for (int64_t t = 0; t < steps; ++t) h = add(tanh(matmul(h, w)), x);
      return reshape(h, s);
    }
    case OpKind::batch_norm: {
      need(rank == 4, "batch_norm of a non-4-d value");
      const int64_t c = s[1];
      // Made one after another (an argument list has no order).
      // Handles of the registered buffers: copy_ writes their storage.
      Tensor rm = buffer(i, 0, {c}, 0.0), rv = buffer(i, 1, {c}, 1.0);
      Tensor w = param(i, 0, {c}, 0.2, true), b = param(i, 1, {c}, 0.2);
      return nn::batch_norm(a, rm, rv, w, b, true);
    }
    case OpKind::layer_norm: {
      need(rank >= 1, "layer_norm of a 0-d value");
      Tensor w = param(i, 0, {s.back()}, 0.2, true), b = param(i, 1, {s.back()}, 0.2);
      return nn::layer_norm(a, w, b);
    }
    case OpKind::channel_affine: {
      need(rank >= 2, "channel_affine of a value of rank < 2");
      Shape k(s.size(), 1);
      k[1] = s[1];
      Tensor w = param(i, 0, {s[1]}, 0.5, true), b = param(i, 1, {s[1]}, 0.5);
      return add(mul(a, reshape(w, k)), reshape(b, k));
    }
    case OpKind::transpose: return transpose(a, o.ints);
    case OpKind::reshape: {
      const int64_t d = ints(1)[0];
      need(d >= 0 && d + 1 < rank, "reshape dim");
      Shape k = s;
      k[size_t(d)] *= k[size_t(d) + 1];
      k.erase(k.begin() + d + 1);
      return reshape(a, k);
    }
    case OpKind::slice: {
      const std::vector<int64_t> sl = ints(3);
      need(sl[0] >= 0 && sl[0] < rank, "slice axis");
      return slice(a, sl[0], sl[1], sl[2]);
    }
    case OpKind::concat: return concat({a, val(o.b)}, ints(1)[0]);
    case OpKind::softmax: return nn::softmax(a, -1);
    case OpKind::dropout: return nn::dropout(a, double(ints(1)[0]) / 100.0, true);
    case OpKind::select: {
      const Tensor& b = val(o.b);
      need(broadcasts_to(b.shape(), s), "b does not broadcast to a");
      if (o.which == 10) {  // a NaN written, then washed out: a NaN full beside a 0.0 full
        const Tensor v = where(gt(a, b), a, Tensor::scalar(NAN, a.dtype()));
        return where(ne(v, v), Tensor::scalar(0.0, a.dtype()), v);
      }
      return where(gt(a, b), a, mul(a, double(o.which) / 10.0));
    }
    case OpKind::cross_entropy: {
      need(rank == 2 && s[1] >= 2, "cross_entropy of a value not [N, C >= 2]");
      std::vector<int64_t> labels(static_cast<size_t>(s[0]));
      for (size_t j = 0; j < labels.size(); ++j) labels[j] = int64_t(j * 7 + 3) % s[1];
      return nn::cross_entropy(a, Tensor::from_vector(labels, {s[0]}));
    }
    case OpKind::embed: {
      const std::vector<int64_t> e = ints(2);
      need(rank >= 1 && e[0] >= 1 && e[1] >= 1, "embed");
      std::vector<int64_t> idx(static_cast<size_t>(s[0]));
      for (size_t j = 0; j < idx.size(); ++j) idx[j] = int64_t(j * 3 + 1) % e[0];
      Tensor rows = gather(param(i, 0, {e[0], e[1]}, 1.0), Tensor::from_vector(idx, {s[0]}));
      // Plus a's rows (summed over its other dims), so the value reads a.
      std::vector<int64_t> rest;
      for (int64_t d = 1; d < rank; ++d) rest.push_back(d);
      Tensor per_row = rest.empty() ? a : sum(a, rest);
      return add(rows, reshape(per_row, {s[0], 1}));
    }
  }
  throw Error("difftest: unknown op kind");
}

std::vector<Tensor> SpecModel::values(const Tensor& x) {
  std::vector<Tensor> v = {x};
  for (size_t i = 0; i < spec_.ops.size(); ++i) v.push_back(apply(i, v));
  return v;
}

Tensor SpecModel::loss(const Tensor& x) {
  const std::vector<Tensor> v = values(x);
  std::vector<bool> read(v.size(), false);
  for (const OpSpec& o : spec_.ops) {
    if (o.a >= 0 && size_t(o.a) < v.size()) read[size_t(o.a)] = true;
    if (o.b >= 0 && size_t(o.b) < v.size()) read[size_t(o.b)] = true;
  }
  read.back() = false;
  Tensor l;
  for (size_t k = 1; k < v.size(); ++k) {
    if (read[k]) continue;
    std::vector<int64_t> all;
    for (int64_t d = 0; d < v[k].dim(); ++d) all.push_back(d);
    Tensor t = tanh(v[k]);
    Tensor term = all.empty() ? t : mean(t, all);
    term = mul(term, k % 2 ? 1.0 : -0.5);
    l = l.defined() ? add(l, term) : term;
  }
  if (!l.defined()) {  // no op: the input alone
    std::vector<int64_t> all;
    for (int64_t d = 0; d < x.dim(); ++d) all.push_back(d);
    l = mean(tanh(x), all);
  }
  return l;
}

std::unique_ptr<SpecModel> make_model(const Spec& spec, DType dtype) {
  auto m = std::make_unique<SpecModel>(spec, dtype);
  m->values(Tensor::zeros(spec.input, dtype));
  m->building_ = false;
  return m;
}

Tensor make_input(const Spec& spec, uint64_t seed, DType dtype) {
  return draw(mix(spec.seed, seed + 0x1234), spec.input, 0, 0, true, dtype);
}

// ---------------------------------------------------------------- the generator

namespace {

struct Gen {
  std::mt19937_64 rng;
  int pick(int n) { return int(std::uniform_int_distribution<int>(0, n - 1)(rng)); }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  int64_t of(std::initializer_list<int64_t> xs) { return *(xs.begin() + pick(int(xs.size()))); }
};

// Some axes of a value of rank r (a non-empty subset).
std::vector<int64_t> some_axes(Gen& g, int64_t r) {
  std::vector<int64_t> axes;
  while (axes.empty())
    for (int64_t d = 0; d < r; ++d)
      if (g.coin(0.4)) axes.push_back(d);
  return axes;
}

OpSpec random_op(Gen& g, const std::vector<Tensor>& pool) {
  OpSpec o;
  // Mostly the newest value (a chain), else any (branches, residuals).
  o.a = g.coin(0.6) ? int(pool.size()) - 1 : g.pick(int(pool.size()));
  const Shape& s = pool[size_t(o.a)].shape();
  const int64_t r = int64_t(s.size());
  // A second operand that broadcasts to a (an equal value or a reduced one).
  auto pick_b = [&]() {
    std::vector<int> ok;
    for (size_t k = 0; k < pool.size(); ++k)
      if (broadcasts_to(pool[k].shape(), s)) ok.push_back(int(k));
    return ok[size_t(g.pick(int(ok.size())))];
  };
  const int kind = g.pick(kKinds + 6);  // conv, linear and unary more often
  o.kind = kind >= kKinds ? (kind - kKinds < 2   ? OpKind::conv
                             : kind - kKinds < 4 ? OpKind::linear
                                                 : OpKind::unary)
                          : OpKind(kind);
  switch (o.kind) {
    case OpKind::unary: o.which = g.pick(kUnaries); break;
    case OpKind::binary: o.which = g.pick(kBinaries), o.b = pick_b(); break;
    case OpKind::select: o.which = g.pick(11), o.b = pick_b(); break;
    case OpKind::reduce:
      o.which = g.pick(3);
      o.ints = {g.coin() ? 1 : 0};
      for (int64_t x : some_axes(g, std::max<int64_t>(r, 1))) o.ints.push_back(x);
      break;
    case OpKind::normalize:
      // 1: x - mean, 2: x - max, 3: nn::center (its gradient one value),
      // 4: nn::var kept as size-1 dims.
      o.which = g.coin(0.7) ? 1 : g.coin(0.4) ? 2 : g.coin() ? 3 : 4;
      o.ints = some_axes(g, std::max<int64_t>(r, 1));
      break;
    case OpKind::conv: {
      const int64_t c = r == 4 || r == 5 ? s[1] : 1;
      const int64_t groups = g.coin(0.3) ? (g.coin() ? c : g.of({2, 3, 4})) : 1;
      const int64_t out =
          g.coin(0.3) && groups > 1 ? groups * g.of({1, 2}) : g.of({1, 2, 3, 4, 5, 8, 16});
      const int64_t kh = g.of({1, 1, 2, 3, 3, 5}), kw = g.coin(0.7) ? kh : g.of({1, 2, 3});
      o.ints = {out,
                kh,
                kw,
                g.of({1, 1, 1, 2, 3, 4}),
                g.of({0, 0, 1, 2}),
                g.coin(0.15) ? 2 : 1,
                groups,
                g.coin(0.6) ? 1 : 0};
      if (g.coin(0.2)) o.ints.push_back(g.of({0, 1, 2}));  // the width's own padding
      break;
    }
    case OpKind::pool: {
      const int64_t kh = g.of({1, 2, 2, 3, 3}), kw = g.coin(0.7) ? kh : g.of({1, 2, 3});
      o.ints = {g.coin() ? 1 : 0, kh, kw, g.of({1, 2, 2, 3, 4}), g.of({0, 0, 1})};
      break;
    }
    case OpKind::linear: {
      // Now and then a weight of 512 KiB or more, which over a few rows is
      // a product of our own (exec/few_row_products.hpp) in both
      // directions; kept when its value stays small.
      const int64_t d = std::max<int64_t>(s.empty() ? 1 : s.back(), 1);
      const int64_t out = g.coin(0.15) ? (int64_t(1) << 17) / d + 1 + g.pick(40)
                                       : g.of({1, 2, 3, 5, 7, 8, 16, 17, 32});
      o.ints = {out, g.coin(0.6) ? 1 : 0};
      break;
    }
    case OpKind::transpose: {
      std::vector<int64_t> perm(size_t(std::max<int64_t>(r, 1)));
      for (size_t d = 0; d < perm.size(); ++d) perm[d] = int64_t(d);
      std::shuffle(perm.begin(), perm.end(), g.rng);
      o.ints = perm;
      break;
    }
    case OpKind::reshape: o.ints = {g.pick(int(std::max<int64_t>(r - 1, 1)))}; break;
    case OpKind::slice: {
      const int64_t axis = g.pick(int(std::max<int64_t>(r, 1)));
      const int64_t n = r ? s[size_t(axis)] : 1;
      const int64_t start = g.pick(int(n));
      o.ints = {axis, start, start + 1 + g.pick(int(n - start))};
      break;
    }
    case OpKind::concat: {
      o.ints = {g.pick(int(std::max<int64_t>(r, 1)))};
      std::vector<int> ok;
      for (size_t k = 0; k < pool.size(); ++k) {
        const Shape& t = pool[k].shape();
        bool fits = t.size() == s.size();
        for (size_t d = 0; fits && d < t.size(); ++d)
          fits = int64_t(d) == o.ints[0] || t[d] == s[d];
        if (fits) ok.push_back(int(k));
      }
      o.b = ok[size_t(g.pick(int(ok.size())))];
      break;
    }
    case OpKind::dropout: o.ints = {g.of({10, 25, 50})}; break;
    case OpKind::embed: o.ints = {g.of({1, 2, 5, 11}), g.of({1, 3, 8, 16})}; break;
    case OpKind::recurrent: o.ints = {g.of({1, 2, 3, 5, 8})}; break;
    default: break;
  }
  return o;
}

}  // namespace

Spec generate(uint64_t seed, int max_ops) {
  Gen g{std::mt19937_64(seed)};
  Spec s;
  s.seed = seed;
  const int shape_kind = g.pick(5);
  if (shape_kind == 4)  // a volume: 3-d convolutions
    s.input = {g.of({1, 2, 3}), g.of({1, 2, 3, 4}), g.of({1, 2, 3, 5}), g.of({1, 2, 4, 5, 7}),
               g.of({1, 3, 4, 6})};
  else if (shape_kind < 2)
    s.input = {g.of({1, 2, 3, 4}), g.of({1, 2, 3, 4, 5, 8, 16}), g.of({1, 2, 3, 4, 5, 7, 8, 9, 16}),
               g.of({1, 2, 3, 4, 5, 7, 8, 9, 16})};
  else if (shape_kind == 2)
    s.input = {g.of({1, 2, 3}), g.of({1, 2, 3, 5, 8, 9}), g.of({1, 2, 4, 7, 16, 17, 32})};
  else
    s.input = {g.of({1, 2, 3, 4, 8}), g.of({1, 2, 3, 5, 7, 16, 33})};
  s.opt = OptKind(g.pick(3));
  s.momentum = g.coin(), s.nesterov = s.momentum && g.coin(), s.weight_decay = g.coin(0.4);
  s.amsgrad = g.coin(0.3), s.clip = g.coin(0.25);
  s.nonfinite = g.coin(0.2) ? 1 : 2;
  s.memory_budget = g.coin(0.15) ? 0.5 : 0;
  // Ops are kept when the library takes them eagerly and the values stay
  // small.
  SpecModel m(s, DType::f32);
  std::vector<Tensor> pool = {make_input(s, 0, DType::f32)};
  const int n = 1 + g.pick(max_ops);
  for (int tries = 0; int(m.spec_.ops.size()) < n && tries < 20 * n; ++tries) {
    OpSpec o = random_op(g, pool);
    m.spec_.ops.push_back(o);
    try {
      Tensor y = m.apply(m.spec_.ops.size() - 1, pool);
      if (y.numel() == 0 || y.numel() > (int64_t(1) << 15)) throw Error("too large or empty");
      pool.push_back(y);
    } catch (const Error& e) {
      if (std::getenv("WS_DIFFTEST_VERBOSE")) fmt::print("generate: {}\n", e.what());
      m.spec_.ops.pop_back();
      // Drop what the failed op made (its parameters are re-drawn by the
      // next op at this place).
      if (m.params_.size() > m.spec_.ops.size()) m.params_.resize(m.spec_.ops.size());
      if (m.buffers_.size() > m.spec_.ops.size()) m.buffers_.resize(m.spec_.ops.size());
    }
  }
  s.ops = m.spec_.ops;
  return s;
}

// ---------------------------------------------------------------- shrinking

std::vector<Spec> shrink_candidates(const Spec& s) {
  std::vector<Spec> out;
  // Each op removed, newest first; value k + 1 is op k's.
  for (size_t k = s.ops.size(); k-- > 0;) {
    Spec t = s;
    const int gone = int(k) + 1, instead = s.ops[k].a;
    t.ops.erase(t.ops.begin() + int64_t(k));
    for (OpSpec& o : t.ops) {
      for (int* r : {&o.a, &o.b}) {
        if (*r == gone)
          *r = instead;
        else if (*r > gone)
          --*r;
      }
    }
    out.push_back(t);
  }
  // The optimizer and the step's options at their simplest.
  auto flag = [&](auto member, auto value) {
    Spec t = s;
    if (t.*member == value) return;
    t.*member = value;
    out.push_back(t);
  };
  flag(&Spec::opt, OptKind::sgd);
  flag(&Spec::momentum, false);
  flag(&Spec::nesterov, false);
  flag(&Spec::weight_decay, false);
  flag(&Spec::amsgrad, false);
  flag(&Spec::clip, false);
  flag(&Spec::nonfinite, 2);
  flag(&Spec::memory_budget, 0.0);
  // Each extent of the input smaller.
  for (size_t d = 0; d < s.input.size(); ++d)
    for (int64_t e : {int64_t(1), s.input[d] / 2, s.input[d] - 1})
      if (e >= 1 && e < s.input[d]) {
        Spec t = s;
        t.input[d] = e;
        out.push_back(t);
      }
  return out;
}

}  // namespace ws::difftest
