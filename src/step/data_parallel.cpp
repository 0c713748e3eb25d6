#include "step/data_parallel.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "capture/tracer.hpp"
#include "ir/text.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::step {

namespace {

// FNV-1a: the same on every machine, unlike std::hash.
uint64_t text_hash(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = std::min(s.find('\n', at), s.size());
    out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Where rank r's graph text first differs from rank 0's.
std::string first_difference(const std::string& mine, const std::string& other, int other_rank) {
  const std::vector<std::string> a = lines(mine), b = lines(other);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto line = [](const std::vector<std::string>& l, size_t i) {
    return i < l.size() ? "`" + l[i] + "`" : std::string("the end of the graph");
  };
  return fmt::format("at line {}: rank 0 has {}, rank {} has {}", i + 1, line(a, i), other_rank,
                     line(b, i));
}

}  // namespace

void synchronize_ranks(const CapturedStep& cap) {
  if (dist::world_size() == 1) return;
  const std::string text = ir::print(cap.joint.graph, {.locations = false});
  const std::vector<uint64_t> hashes = dist::all_gather(text_hash(text));
  for (size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] == hashes[0]) continue;
    const std::vector<std::string> texts = dist::all_gather_text(text);
    throw dist::GroupError(fmt::format(
        "data parallelism: rank {} traced another step graph than rank 0 (another model, batch "
        "shape, optimizer or option), {}; every rank must compile the same step",
        r, first_difference(texts[0], texts[r], int(r))));
  }
  for (size_t i = 0; i < cap.persistent.size(); ++i) {
    if (std::find(cap.rank_local.begin(), cap.rank_local.end(), i) != cap.rank_local.end())
      continue;
    const Tensor& t = cap.persistent[i].second;
    dist::broadcast(t.impl()->storage->data, t.nbytes(), 0);
  }
  for (size_t i = 0; i < cap.persistent.size(); ++i)
    if (cap.persistent[i].first == capture::Tracer::kSeedInput) {
      int64_t* seed = static_cast<int64_t*>(cap.persistent[i].second.impl()->storage->data);
      *seed = int64_t(uint64_t(*seed) + uint64_t(dist::rank()) * 0x9E3779B97F4A7C15ull);
    }
}

}  // namespace ws::step
