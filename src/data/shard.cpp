// Data parallelism: each rank's part of a global batch.
#include <fmt/format.h>

#include "wholestep/data.hpp"
#include "wholestep/error.hpp"

namespace ws::data {

Shard shard(int64_t n, int rank, int world) {
  if (n < 0 || world < 1 || rank < 0 || rank >= world)
    throw Error(fmt::format(
        "data::shard: rank {} of {} over {} examples; needs n >= 0 and 0 <= rank < world", rank,
        world, n));
  // n * rank would overflow past 2^63 / world examples; the quotient and
  // remainder apart do not.
  auto at = [&](int64_t r) { return n / world * r + n % world * r / world; };
  return {at(rank), at(int64_t(rank) + 1)};
}

}  // namespace ws::data
