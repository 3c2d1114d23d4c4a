#include "headrace/exec/batch_placement.h"

#include <gtest/gtest.h>

#include <vector>

namespace headrace {
namespace {

// Two fields: 0 lends windows from a block of 100 bytes, 1 lends none.
struct Placed {
  BatchPlacement placement;
  explicit Placed(int samples, size_t capacity = 100) {
    placement.Start({capacity, 0}, std::shared_ptr<Allocator>(std::shared_ptr<void>(),
                                                              DefaultAllocator()),
                    samples);
  }
  // Sample `slot` tells `bytes` for field 0 and 8 for field 1: its window of field 0.
  Buffer Tell(int slot, size_t bytes) {
    std::vector<size_t> told{bytes, 8};
    std::vector<Buffer> windows(2);
    placement.Place(slot, told, windows);
    EXPECT_TRUE(windows[1].empty()) << "field 1 has no block";
    return windows[0];
  }
};

TEST(BatchPlacement, WindowsLieAtTheSumOfTheRowsToldBeforeThemInOneBlock) {
  Placed p(3);
  const Buffer w0 = p.Tell(0, 10);
  const Buffer w1 = p.Tell(1, 0);  // nothing told: no window, no room
  const Buffer w2 = p.Tell(2, 30);
  ASSERT_EQ(w0.size(), 10u);
  EXPECT_TRUE(w1.empty());
  ASSERT_EQ(w2.size(), 30u);
  EXPECT_EQ(w2.data(), w0.data() + 10);
  const Buffer block = p.placement.Adopt(0);
  EXPECT_EQ(block.data(), w0.data()) << "the join adopts the block the windows are of";
  EXPECT_GE(block.size(), 100u);
  EXPECT_TRUE(p.placement.Adopt(0).empty()) << "once";
  EXPECT_EQ(p.placement.windows_lent(), 2);
  EXPECT_EQ(p.placement.bytes_lent(), 40);
  EXPECT_TRUE(p.Tell(2, 30).empty()) << "a sample is placed once";
}

TEST(BatchPlacement, ASampleThatTellsFirstGetsNoWindowButItsRoomIsKept) {
  Placed p(3);
  EXPECT_TRUE(p.Tell(1, 20).empty()) << "sample 0 has not told: no offset for 1 yet";
  const Buffer w0 = p.Tell(0, 10);
  const Buffer w2 = p.Tell(2, 5);
  ASSERT_FALSE(w0.empty());
  ASSERT_FALSE(w2.empty());
  EXPECT_EQ(w2.data(), w0.data() + 30) << "after sample 1's 20 bytes, to be copied there";
}

TEST(BatchPlacement, ASampleThatToldFirstIsLentItsWindowWhenItAsksAgainOnceThoseBeforeTold) {
  Placed p(3);
  EXPECT_TRUE(p.Tell(1, 20).empty());
  EXPECT_TRUE(p.placement.Lend(1, 0).empty()) << "sample 0 has still not told";
  const Buffer w0 = p.Tell(0, 10);
  ASSERT_FALSE(w0.empty());
  const Buffer w1 = p.placement.Lend(1, 0);
  ASSERT_EQ(w1.size(), 20u);
  EXPECT_EQ(w1.data(), w0.data() + 10) << "after sample 0's rows";
  EXPECT_TRUE(p.placement.Lend(1, 0).empty()) << "lent once";
  EXPECT_TRUE(p.placement.Lend(1, 1).empty()) << "field 1 lends none";
  EXPECT_TRUE(p.placement.Lend(2, 0).empty()) << "sample 2 told nothing";
  EXPECT_EQ(p.placement.windows_lent(), 2);
  EXPECT_EQ(p.placement.bytes_lent(), 30);
  const Buffer w2 = p.Tell(2, 5);
  EXPECT_EQ(w2.data(), w0.data() + 30);
}

TEST(BatchPlacement, NoWindowIsLentLateWhereTheJoinMayHaveWritten) {
  Placed p(3);
  EXPECT_TRUE(p.Tell(1, 20).empty());
  ASSERT_FALSE(p.Tell(0, 10).empty());
  // Sample 0 wrote 15 bytes, not 10: the join copies them to [0, 15), over where sample
  // 1's window would lie.
  EXPECT_TRUE(p.placement.MayWrite(0, 0, 15));
  EXPECT_TRUE(p.placement.Lend(1, 0).empty());
  p.placement.Close();
  EXPECT_TRUE(p.placement.Lend(1, 0).empty()) << "closed";
}

TEST(BatchPlacement, NoWindowIsLentPastTheBlockNorAfterOneThatDidNotFit) {
  Placed p(4);
  ASSERT_FALSE(p.Tell(0, 60).empty());
  EXPECT_TRUE(p.Tell(1, 50).empty()) << "60 + 50 > 100";
  EXPECT_TRUE(p.Tell(2, 1).empty()) << "its offset would be past the block's end";
  EXPECT_TRUE(p.Tell(3, 1).empty());
}

TEST(BatchPlacement, NoBlockIsMadeForAFieldTheJoinAdoptedFirst) {
  Placed p(2);
  EXPECT_TRUE(p.placement.Adopt(0).empty()) << "no window lent yet: the join makes its own";
  EXPECT_TRUE(p.Tell(0, 10).empty());
  EXPECT_EQ(p.placement.windows_lent(), 0);
}

TEST(BatchPlacement, TheJoinMayNotWriteWhereALaterSamplesWindowLies) {
  Placed p(3);
  ASSERT_FALSE(p.Tell(0, 10).empty());
  ASSERT_FALSE(p.Tell(1, 10).empty());  // [10, 20)
  EXPECT_TRUE(p.placement.MayWrite(0, 0, 10)) << "its own window";
  EXPECT_FALSE(p.placement.MayWrite(0, 0, 15)) << "sample 0 wrote more than it told";
  EXPECT_TRUE(p.placement.MayWrite(0, 1, 25)) << "past the windows lent";
  // The join wrote up to 25 > the 20 told: no window may be lent below it from now on.
  EXPECT_TRUE(p.Tell(2, 10).empty());
}

TEST(BatchPlacement, AGuessedBlockHoldsTwiceTheFirstWindowForEachSampleFromItOn) {
  Placed p(4, BatchPlacement::kGuess);
  EXPECT_TRUE(p.Tell(0, 0).empty()) << "nothing told: no block yet";
  const Buffer w1 = p.Tell(1, 10);
  ASSERT_EQ(w1.size(), 10u);
  const Buffer block = p.placement.Adopt(0);
  EXPECT_EQ(block.data(), w1.data());
  EXPECT_GE(block.size(), 2u * 3 * 10) << "samples 1, 2 and 3, twice sample 1's rows";
  EXPECT_FALSE(p.Tell(2, 25).empty());
  EXPECT_TRUE(p.Tell(3, 30).empty()) << "10 + 25 + 30 > 60";
}

TEST(BatchPlacement, ClosedItLendsNothingAndHoldsNoBlock) {
  Placed p(2);
  const Buffer w0 = p.Tell(0, 10);
  ASSERT_FALSE(w0.empty());
  const long before = w0.use_count();
  p.placement.Close();
  EXPECT_EQ(w0.use_count(), before - 2) << "its lending handle and the unadopted one";
  EXPECT_TRUE(p.Tell(1, 10).empty());
}

}  // namespace
}  // namespace headrace
