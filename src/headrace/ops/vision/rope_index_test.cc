#include "headrace/ops/vision/rope_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

namespace headrace {
namespace rope_index_test {
namespace {

using ::testing::HasSubstr;
using Pos = std::array<int64_t, 3>;

constexpr int64_t I = 151655, V = 151656, S = 151652, E = 151653;  // Qwen's ids

struct Out {
  std::vector<Pos> positions;
  int64_t delta = 0;
};

Result<Out> Rope(VisionModel model, const std::vector<int64_t>& ids,
                const std::vector<int64_t>& images, const std::vector<int64_t>& videos = {},
                const std::vector<float>& seconds = {}) {
  RopeIndexParams params;
  params.model = model;
  std::vector<int64_t> flat(3 * ids.size(), -7);
  HR_ASSIGN_OR_RETURN(int64_t delta, RopeIndex(params, ids, images, videos, seconds, flat));
  Out out;
  out.delta = delta;
  for (size_t i = 0; i < ids.size(); ++i) out.positions.push_back({flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]});
  return out;
}

// Every expected value below is what transformers 5.23's get_rope_index returns for the
// same tokens and grids (Qwen2VLModel, Qwen2_5_VLModel, Qwen3VLModel; checked once by
// hand with a stub config, merge size 2, tokens_per_second 2).

TEST(RopeIndex, TextContinuesAfterAnImageFromItsStartPlusItsLongerSide) {
  // grid (1, 4, 4): 2 x 2 tokens, from position 3.
  const auto out = Rope(VisionModel::kQwen2Vl, {10, 11, S, I, I, I, I, E, 12}, {1, 4, 4});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions, (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3},
                                              {3, 3, 4}, {3, 4, 3}, {3, 4, 4}, {5, 5, 5},
                                              {6, 6, 6}}));
  EXPECT_EQ(out->delta, -2);
}

TEST(RopeIndex, SeveralImagesOfDifferentShapesTakeTheirOwnGridsInOrder) {
  // (1, 2, 6): one row of three; (1, 4, 2): two rows of one.
  const auto out =
      Rope(VisionModel::kQwen2Vl, {S, I, I, I, E, S, I, I, E, 13}, {1, 2, 6, 1, 4, 2});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions, (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {1, 1, 2}, {1, 1, 3},
                                              {4, 4, 4}, {5, 5, 5}, {6, 6, 6}, {6, 7, 6},
                                              {8, 8, 8}, {9, 9, 9}}));
  EXPECT_EQ(out->delta, 0);
}

TEST(RopeIndex, ATextOnlySampleIsArangeThreeTimesWithDeltaZero) {
  for (VisionModel model : {VisionModel::kQwen2Vl, VisionModel::kQwen2_5Vl, VisionModel::kQwen3Vl}) {
    const auto out = Rope(model, {5, 6, 7, 8, S, E}, {});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out->positions[i], (Pos{i, i, i}));
    EXPECT_EQ(out->delta, 0);
  }
  const auto empty = Rope(VisionModel::kQwen2Vl, {}, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->delta, 0);
}

TEST(RopeIndex, AVideosTemporalGroupsCountOnInTheFirstDimension) {
  // (2, 4, 4): two temporal groups of 2 x 2; the text after starts at 1 + 2.
  const std::vector<int64_t> ids = {10, V, V, V, V, V, V, V, V, 11};
  const std::vector<Pos> qwen2 = {{0, 0, 0}, {1, 1, 1}, {1, 1, 2}, {1, 2, 1}, {1, 2, 2},
                                  {2, 1, 1}, {2, 1, 2}, {2, 2, 1}, {2, 2, 2}, {3, 3, 3}};
  auto out = Rope(VisionModel::kQwen2Vl, ids, {}, {2, 4, 4});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions, qwen2);
  EXPECT_EQ(out->delta, -6);
  // Qwen2.5-VL: groups spaced by tokens_per_second (2) x seconds per grid (1: the default).
  out = Rope(VisionModel::kQwen2_5Vl, ids, {}, {2, 4, 4});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions, (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {1, 1, 2}, {1, 2, 1},
                                              {1, 2, 2}, {3, 1, 1}, {3, 1, 2}, {3, 2, 1},
                                              {3, 2, 2}, {3, 3, 3}}));
  EXPECT_EQ(out->delta, -6);
}

TEST(RopeIndex, TheTextAfterAVideoStartsAfterItsSidesNotItsFrames) {
  // (3, 2, 2): three groups of one token. transformers 5.23 moves on by max(h, w) / M = 1,
  // so the text after (2) is below the last frame's 3, and the delta counts the 3.
  auto out = Rope(VisionModel::kQwen2Vl, {S, V, V, V, E}, {}, {3, 2, 2});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions,
            (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {2, 2, 2}}));
  EXPECT_EQ(out->delta, -1);
  // Qwen2.5-VL, 1.25 s per grid: interval 2.5, floor(0, 2.5, 5.0) = 0, 2, 5.
  out = Rope(VisionModel::kQwen2_5Vl, {S, V, V, V, E}, {}, {3, 2, 2}, {1.25f});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions,
            (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {3, 1, 1}, {6, 1, 1}, {2, 2, 2}}));
  EXPECT_EQ(out->delta, 2);
}

TEST(RopeIndex, Qwen3SplitsAVideoIntoOneBlockPerFrame) {
  // Frames separated by their timestamps' text: each is a (1, 4, 4) block.
  const std::vector<int64_t> ids = {10, S, V, V, V, V, E, 11, S, V, V, V, V, E};
  auto out = Rope(VisionModel::kQwen3Vl, ids, {}, {2, 4, 4});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->positions, (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {2, 2, 3},
                                              {2, 3, 2}, {2, 3, 3}, {4, 4, 4}, {5, 5, 5},
                                              {6, 6, 6}, {7, 7, 7}, {7, 7, 8}, {7, 8, 7},
                                              {7, 8, 8}, {9, 9, 9}}));
  EXPECT_EQ(out->delta, -4);
  // Qwen2-VL reads the same grid as one block of 8 tokens: these are two of 4.
  EXPECT_THAT(Rope(VisionModel::kQwen2Vl, ids, {}, {2, 4, 4}).status().message(),
              HasSubstr("video block 0 is 4 tokens, but its grid video_grid_thw[0] = (2, 4, 4) "
                        "has 8"));
  // And Qwen3-VL one of 8 as a frame too long.
  EXPECT_THAT(Rope(VisionModel::kQwen3Vl, {V, V, V, V, V, V, V, V}, {}, {2, 4, 4}).status().message(),
              HasSubstr("video block 0 frame 0 is 8 tokens, but its grid"));
  // A frame short: one block of two frames' grid.
  EXPECT_THAT(Rope(VisionModel::kQwen3Vl, {S, V, V, V, V, E}, {}, {2, 4, 4}).status().message(),
              HasSubstr("the sample has 1 video grid in video_grid_thw but its tokens hold 0 "
                        "such blocks (and 1 of the next one's frames)"));
}

TEST(RopeIndex, ImagesAndVideosTakeGridsFromTheirOwnLists) {
  const std::vector<int64_t> ids = {I, V, V, I};
  for (VisionModel model : {VisionModel::kQwen2Vl, VisionModel::kQwen2_5Vl}) {
    const auto out = Rope(model, ids, {1, 2, 2, 1, 2, 2}, {2, 2, 2}, {0.7f});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    // 2.5: interval 1.4, floor(1.4) = 1: the same as 2's.
    EXPECT_EQ(out->positions, (std::vector<Pos>{{0, 0, 0}, {1, 1, 1}, {2, 1, 1}, {2, 2, 2}}));
    EXPECT_EQ(out->delta, -1);
  }
}

TEST(RopeIndex, BlocksAndGridsThatDisagreeAreTheSamplesError) {
  EXPECT_THAT(Rope(VisionModel::kQwen2Vl, {S, I, E, S, I, E}, {1, 2, 2}).status().message(),
              HasSubstr("the tokens hold more image blocks than the sample's 1 grid in "
                        "image_grid_thw"));
  EXPECT_THAT(Rope(VisionModel::kQwen2Vl, {S, I, E}, {1, 2, 2, 1, 2, 2}).status().message(),
              HasSubstr("the sample has 2 image grids in image_grid_thw but its tokens hold 1"));
  EXPECT_THAT(Rope(VisionModel::kQwen2Vl, {S, I, I, E}, {1, 2, 2}).status().message(),
              HasSubstr("image block 0 is 2 tokens, but its grid image_grid_thw[0] = (1, 2, 2) "
                        "has 1"));
  EXPECT_THAT(Rope(VisionModel::kQwen2Vl, {S, I, E}, {1, 3, 2}).status().message(),
              HasSubstr("image_grid_thw[0] = (1, 3, 2) is not a grid of merge_size 2"));
  const auto bad = Rope(VisionModel::kQwen2Vl, {S, V, E}, {});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// The op over a sample's rows: ragged input_ids and a list's grids (kItems, appended)
// in, ragged positions and the delta out; or padded input_ids with their mask.
struct Fixture {
  std::vector<FieldSpec> fields;
  RaggedRows ragged;
  std::vector<uint8_t*> rows;
  int64_t delta[1] = {-99};
  SampleContext ctx;

  explicit Fixture(DType out = DType::kI64)
      : fields{FieldSpec{"input_ids", DType::kI64, {}, FieldLayout::kRagged},
               FieldSpec{"input_ids_lengths", DType::kI32, {}, FieldLayout::kLengths},
               FieldSpec{"image_grid_thw", DType::kI64, {3}, FieldLayout::kItems},
               FieldSpec{"mrope_position_ids", out, {3}, FieldLayout::kRagged},
               FieldSpec{"mrope_position_ids_lengths", DType::kI32, {}, FieldLayout::kLengths},
               FieldSpec{"rope_deltas", DType::kI64, {1}}},
        ragged(fields, std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {})) {
    rows = {nullptr, nullptr, nullptr, nullptr, nullptr, reinterpret_cast<uint8_t*>(delta)};
    ctx.rows = rows.data();
    ctx.ragged = &ragged;
  }
  void Append(int field, const std::vector<int64_t>& values, int64_t width) {
    uint8_t* p = *ragged.Append(field, static_cast<int64_t>(values.size()) / width);
    std::memcpy(p, values.data(), values.size() * sizeof(int64_t));
  }
};

RopeIndexOp::Grids ItemGrids() {
  return {RopeIndexOp::Grids::Layout::kAppended, 2, 0, "image_grid_thw"};
}

TEST(RopeIndexOp, AppendsOneRowPerTokenAndWritesTheDelta) {
  Fixture f;
  f.Append(0, {10, 11, S, I, I, I, I, E, 12}, 1);
  f.Append(2, {1, 4, 4}, 3);
  const RopeIndexOp op(RopeIndexParams{}, {.input_ids = 0, .output = 3, .deltas = 5}, ItemGrids(),
                       {}, 1.0f, RopeIdType::kI64);
  ASSERT_TRUE(op.Run(f.ctx).ok());
  ASSERT_EQ(f.ragged.rows(3), 9);
  ASSERT_EQ(f.ragged.lengths(3).size(), 1u);  // one entry: this sample
  const auto bytes = f.ragged.bytes(3);
  std::vector<int64_t> got(bytes.size() / 8);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 4, 3, 4, 3, 3, 4,
                                       4, 5, 5, 5, 6, 6, 6}));
  EXPECT_EQ(f.delta[0], -2);
}

TEST(RopeIndexOp, WritesI32WhenAsked) {
  Fixture f(DType::kI32);
  f.Append(0, {S, I, E}, 1);
  f.Append(2, {1, 2, 2}, 3);
  const RopeIndexOp op(RopeIndexParams{}, {.input_ids = 0, .output = 3, .deltas = 5}, ItemGrids(),
                       {}, 1.0f, RopeIdType::kI32);
  ASSERT_TRUE(op.Run(f.ctx).ok());
  const auto bytes = f.ragged.bytes(3);
  ASSERT_EQ(bytes.size(), 9 * sizeof(int32_t));
  std::vector<int32_t> got(9);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(f.delta[0], 0);
}

TEST(RopeIndexOp, PaddedInputIdsGetZerosPastTheMaskAndADeltaOfTheTokens) {
  // pad: true: input_ids and attention_mask i64 [6], the output fixed [6, 3].
  std::vector<FieldSpec> fields = {FieldSpec{"input_ids", DType::kI64, {6}},
                                   FieldSpec{"attention_mask", DType::kI64, {6}},
                                   FieldSpec{"image_grid_thw", DType::kI64, {3}},
                                   FieldSpec{"mrope_position_ids", DType::kI64, {6, 3}},
                                   FieldSpec{"rope_deltas", DType::kI64, {1}}};
  int64_t ids[6] = {7, S, I, E, 0, 0}, mask[6] = {1, 1, 1, 1, 0, 0}, grid[3] = {1, 2, 2};
  int64_t out[18], delta[1];
  std::memset(out, 0x5A, sizeof out);
  uint8_t* rows[] = {reinterpret_cast<uint8_t*>(ids), reinterpret_cast<uint8_t*>(mask),
                     reinterpret_cast<uint8_t*>(grid), reinterpret_cast<uint8_t*>(out),
                     reinterpret_cast<uint8_t*>(delta)};
  SampleContext ctx;
  ctx.rows = rows;
  const RopeIndexOp op(RopeIndexParams{},
                       {.input_ids = 0, .attention_mask = 1, .length = 6, .output = 3, .deltas = 4},
                       {RopeIndexOp::Grids::Layout::kOne, 2, 0, "image_grid_thw"}, {}, 1.0f,
                       RopeIdType::kI64);
  ASSERT_TRUE(op.Run(ctx).ok());
  EXPECT_EQ(std::vector<int64_t>(out, out + 18),
            (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(delta[0], 0);  // max 3 + 1 - 4 tokens
}

TEST(RopeIndexOp, ASampleWhoseTokensAndGridsDisagreeFails) {
  Fixture f;
  f.Append(0, {S, I, E, S, I, E}, 1);
  f.Append(2, {1, 2, 2}, 3);
  const RopeIndexOp op(RopeIndexParams{}, {.input_ids = 0, .output = 3, .deltas = 5}, ItemGrids(),
                       {}, 1.0f, RopeIdType::kI64);
  const Status status = op.Run(f.ctx);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("more image blocks than the sample's 1 grid"));
  EXPECT_EQ(f.ragged.rows(3), 0);  // nothing appended
}

TEST(RopeIndexSpec, PresetsPickTheRuleAndExplicitKeysOverride) {
  EXPECT_EQ(ResolveRopeIndex({}).model, VisionModel::kQwen2Vl);
  EXPECT_EQ(ResolveRopeIndex({}).merge_size, 0);  // the grid writer's, at plan time
  EXPECT_EQ(ResolveRopeIndex({.preset = VisionModel::kQwen3Vl}).model, VisionModel::kQwen3Vl);
  EXPECT_EQ(ResolveRopeIndex({.preset = VisionModel::kQwen2_5Vl}).merge_size, 2);
  EXPECT_EQ(ResolveRopeIndex({.preset = VisionModel::kQwen2_5Vl}).tokens_per_second, 2.0f);
  const RopeIndexParams p = ResolveRopeIndex(
      {.preset = VisionModel::kQwen2Vl, .merge_size = 4, .image_token_id = 5, .tokens_per_second = 25});
  EXPECT_EQ(p.merge_size, 4);
  EXPECT_EQ(p.image_token_id, 5);
  EXPECT_EQ(p.video_token_id, 151656);
  EXPECT_EQ(p.tokens_per_second, 25.0f);
  EXPECT_THAT(RopeIndexOp::Validate({.image_token_id = 151656}, "k").message(),
              HasSubstr("k.video_token_id: must differ from image_token_id (both 151656)"));
  EXPECT_THAT(RopeIndexOp::Validate({.grid_field = ""}, "k").message(),
              HasSubstr("k.grid_field: name the image grids"));
  EXPECT_TRUE(RopeIndexOp::Validate({.grid_field = "", .video_grid_field = "v"}, "k").ok());
}

}  // namespace
}  // namespace rope_index_test
}  // namespace headrace
