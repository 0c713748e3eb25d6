// ws::data::shard: each rank's part of a global batch.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "data/idx_files.hpp"
#include "wholestep/data.hpp"

namespace ws::data {
namespace {

using test_util::contains_all;
using test_util::error_message;

TEST(Shard, EqualContiguousPartsInRankOrder) {
  for (int r = 0; r < 4; ++r) {
    const Shard s = shard(128, r, 4);
    EXPECT_EQ(s.begin, 32 * r);
    EXPECT_EQ(s.size(), 32);
  }
  const Shard whole = shard(128, 0, 1);
  EXPECT_EQ(whole.begin, 0);
  EXPECT_EQ(whole.end, 128);
}

TEST(Shard, UnevenPartsCoverTheBatchOnce) {
  for (int64_t n : {0, 1, 5, 7, 100}) {
    for (int world = 1; world <= 6; ++world) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const Shard s = shard(n, r, world);
        EXPECT_EQ(s.begin, next) << n << " over " << world;
        EXPECT_GE(s.size(), n / world);
        EXPECT_LE(s.size(), n / world + 1);
        next = s.end;
      }
      EXPECT_EQ(next, n) << n << " over " << world;
    }
  }
}

TEST(Shard, LargeBatchesDoNotOverflow) {
  const int64_t n = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(shard(n, 2, 3).end, n);
  EXPECT_EQ(shard(n, 0, 3).end, n / 3);
}

TEST(Shard, ARankOutsideTheGroupIsAnError) {
  EXPECT_TRUE(contains_all(error_message([] { shard(8, 2, 2); }), {"data::shard", "rank 2 of 2"}));
  EXPECT_TRUE(contains_all(error_message([] { shard(8, -1, 2); }), {"rank -1 of 2"}));
  EXPECT_TRUE(contains_all(error_message([] { shard(8, 0, 0); }), {"rank 0 of 0"}));
  EXPECT_TRUE(contains_all(error_message([] { shard(-1, 0, 1); }), {"over -1 examples"}));
}

}  // namespace
}  // namespace ws::data
