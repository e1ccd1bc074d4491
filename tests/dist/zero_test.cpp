// ZeRO-1 parameter ownership: balanced, deterministic, every parameter owned once.
#include <gtest/gtest.h>

#include <numeric>

#include "dist/zero.h"

namespace {

std::vector<int64_t> owned_elements(const std::vector<int64_t>& numels, const std::vector<int>& owners, int world) {
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  for (size_t i = 0; i < numels.size(); ++i) load.at(static_cast<size_t>(owners[i])) += numels[i];
  return load;
}

TEST(ZeroOwners, LargestFirstToTheLightestRank) {
  // A LLaMA-like layout: two big embeddings, many equal matrices, small norms.
  std::vector<int64_t> numels{1000, 50, 50, 50, 50, 1, 50, 50, 50, 50, 1, 1000};
  const auto owners = ft::dist::assign_owners(numels, 2);
  ASSERT_EQ(owners.size(), numels.size());
  EXPECT_NE(owners[0], owners[11]) << "the two largest go to different ranks";
  const auto load = owned_elements(numels, owners, 2);
  EXPECT_EQ(load[0] + load[1], std::accumulate(numels.begin(), numels.end(), int64_t{0}));
  EXPECT_LE(std::abs(load[0] - load[1]), 1);
  EXPECT_EQ(owners, ft::dist::assign_owners(numels, 2)) << "deterministic";
}

TEST(ZeroOwners, OneRankOwnsAllAndMoreRanksThanParametersLeaveSomeIdle) {
  const std::vector<int64_t> numels{3, 2, 1};
  EXPECT_EQ(ft::dist::assign_owners(numels, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(ft::dist::assign_owners(numels, 4), (std::vector<int>{0, 1, 2}));
}

}  // namespace
