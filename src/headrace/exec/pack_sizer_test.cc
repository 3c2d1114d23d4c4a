#include "headrace/exec/pack_sizer.h"

#include <gtest/gtest.h>

#include <string>

namespace headrace {
namespace {

Buffer Bytes(size_t n, char c) { return *Buffer::CopyOf(std::string(n, c).data(), n); }

TEST(ReadMedia, KeepsWhatTheSizerReadUntilTakenOnceAndDropsTheOldestPastItsBytes) {
  ReadMedia media(100);
  media.Put(0, 1, {Bytes(40, 'a')});
  media.Put(0, 2, {Bytes(30, 'b'), Bytes(10, 'c')});
  EXPECT_EQ(media.bytes(), 80);
  std::optional<std::vector<Buffer>> two = media.Take(0, 2);
  ASSERT_TRUE(two.has_value());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].data()[0], 'c');
  EXPECT_FALSE(media.Take(0, 2).has_value()) << "taken once";
  EXPECT_FALSE(media.Take(1, 1).has_value()) << "another epoch's sample 1";
  EXPECT_EQ(media.bytes(), 40);
  media.Put(0, 3, {Bytes(50, 'd')});
  media.Put(0, 4, {Bytes(20, 'e')});  // 110 bytes: the oldest (sample 1) goes
  EXPECT_EQ(media.bytes(), 70);
  EXPECT_FALSE(media.Take(0, 1).has_value()) << "dropped: its sample reads it again";
  EXPECT_TRUE(media.Take(0, 3).has_value());
  media.Put(0, 5, {Bytes(101, 'f')});  // more than all: not kept
  EXPECT_FALSE(media.Take(0, 5).has_value());
  EXPECT_EQ(media.bytes(), 20);
}

// An op whose size pass tells (or not), and is no text.tokenize.
class Telling final : public Op {
 public:
  explicit Telling(bool tells) : tells_(tells) {}
  std::string_view name() const override { return "test.telling"; }
  Status Run(SampleContext&) const override { return Status::Ok(); }
  bool Tells() const override { return tells_; }

 private:
  bool tells_;
};

TEST(ChainTellsTokens, NotWithoutATokenizeNorAfterAnOpThatCannotTell) {
  EngineInputs in;
  in.chain().ops.push_back(std::make_unique<Telling>(true));
  EXPECT_FALSE(ChainTellsTokens(in)) << "no text.tokenize";
  in.chain().ops.push_back(std::make_unique<Telling>(false));
  EXPECT_FALSE(ChainTellsTokens(in));
  EngineInputs none;
  EXPECT_FALSE(ChainTellsTokens(none)) << "no chain";
}

}  // namespace
}  // namespace headrace
