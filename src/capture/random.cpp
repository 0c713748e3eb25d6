// The library's two random streams: the host generator that initializes
// weights (rand_uniform, randn), and the process's Philox stream (seed and
// offset) that traced random ops draw from.
#include <cmath>
#include <random>

#include "base/random.hpp"
#include "capture/random.hpp"
#include "capture/tracer.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws {
namespace detail {

RngState& rng_state() {
  static RngState st{Tensor::scalar(0, DType::i64), Tensor::scalar(0, DType::i64)};
  return st;
}

}  // namespace detail

namespace {

std::mt19937_64& generator() {
  static std::mt19937_64 gen(0);
  return gen;
}

// mt19937_64 is as fully specified as splitmix64, and changing the
// generator would change every model's initial weights.
double uniform01() { return base::unit_double(generator()()); }

}  // namespace

void manual_seed(uint64_t seed) {
  generator().seed(seed);
  set_random_stream({seed, 0});
}

RandomStream random_stream() {
  detail::RngState& st = detail::rng_state();
  return {uint64_t(*st.seed.data<int64_t>()), uint64_t(*st.offset.data<int64_t>())};
}

void set_random_stream(const RandomStream& s) {
  detail::RngState& st = detail::rng_state();
  *st.seed.data<int64_t>() = int64_t(s.seed);
  *st.offset.data<int64_t>() = int64_t(s.offset);
}

Tensor rand_uniform(const Shape& shape, double lo, double hi, DType dtype) {
  detail::checked_shape(shape, DType::f64, "rand_uniform");
  std::vector<double> v(size_t(numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * uniform01();
  return cast(Tensor::from_vector(v, shape), dtype);
}

Tensor randn(const Shape& shape, double mean, double std, DType dtype) {
  detail::checked_shape(shape, DType::f64, "randn");
  std::vector<double> v(size_t(numel(shape)));
  for (size_t i = 0; i < v.size(); i += 2) {  // Box-Muller, two at a time
    double u1 = 1.0 - uniform01(), u2 = uniform01();
    double r = std::sqrt(-2.0 * std::log(u1));
    v[i] = mean + std * r * std::cos(2 * M_PI * u2);
    if (i + 1 < v.size()) v[i + 1] = mean + std * r * std::sin(2 * M_PI * u2);
  }
  return cast(Tensor::from_vector(v, shape), dtype);
}

}  // namespace ws
