#include "lower/unit_order.hpp"

#include <functional>
#include <queue>

namespace ws::lower {

std::vector<int64_t> order_units(UnitGraph g) {
  const size_t units = g.present.size();
  using Item = std::pair<ir::ValueId, int64_t>;  // (key, unit)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready, blocked;
  for (size_t u = 0; u < units; ++u)
    if (g.present[u] && g.hard[u] == 0) (g.soft[u] ? blocked : ready).push({g.key[u], int64_t(u)});
  std::vector<int64_t> order;
  std::vector<bool> placed(units, false);
  while (!ready.empty() || !blocked.empty()) {
    // Units whose soft predecessors are all placed move to `ready`.
    std::vector<Item> still;
    for (; !blocked.empty(); blocked.pop()) {
      const Item& it = blocked.top();
      if (g.soft[size_t(it.second)])
        still.push_back(it);
      else
        ready.push(it);
    }
    for (const Item& it : still) blocked.push(it);
    Item it;
    if (!ready.empty()) {
      it = ready.top();
      ready.pop();
    } else {  // a cycle of soft edges: the update will be copied
      it = blocked.top();
      blocked.pop();
    }
    const int64_t u = it.second;
    if (placed[size_t(u)]) continue;
    placed[size_t(u)] = true;
    order.push_back(u);
    for (int64_t s : g.soft_succ[size_t(u)]) --g.soft[size_t(s)];
    for (int64_t s : g.succ[size_t(u)])
      if (--g.hard[size_t(s)] == 0)
        (g.soft[size_t(s)] ? blocked : ready).push({g.key[size_t(s)], s});
  }
  return order;
}

}  // namespace ws::lower
