// The size pass (Op::Predict, ReserveRows) of a Qwen-VL chain: image.decode,
// image.smart_resize and vision.patchify tell the rows they will append exactly as running
// them appends, and ChainRunner reserves a sample's patches, one image or a list's, in
// one block of that size.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "headrace/core/allocator_test_util.h"
#include "headrace/ops/chain_runner.h"
#include "headrace/ops/for_each_item.h"
#include "headrace/ops/image/decode.h"
#include "headrace/ops/image/image_test_util.h"
#include "headrace/ops/image/smart_resize.h"
#include "headrace/ops/vision/patchify_op.h"

namespace headrace {
namespace size_pass_test {
namespace {

using testing::Bytes;

using testing::FitCountingAllocator;

uint8_t Texture(int x, int y, int c) { return static_cast<uint8_t>(x * 7 + y * 3 + c * 50); }

// Edge cases of the reference's tests: odd sizes, below min_pixels, a long thin image,
// EXIF rotation (the displayed size is swapped), grayscale, PNG with alpha, WebP.
std::vector<Bytes> Images() {
  std::vector<Bytes> out;
  out.push_back(testing::EncodeJpegRgb(333, 517, Texture));
  out.push_back(testing::EncodeJpegRgb(20, 30, Texture));  // below min_pixels: scaled up
  out.push_back(testing::EncodeJpegRgb(1500, 40, Texture));
  out.push_back(testing::InsertAfterSoi(testing::EncodeJpegRgb(120, 64, Texture),
                                        testing::ExifApp1(6, false)));
  out.push_back(testing::EncodeJpeg(testing::MakePixels(97, 45, 1, Texture), 97, 45, TJPF_GRAY,
                                    TJSAMP_GRAY));
  out.push_back(testing::EncodePng(testing::MakePixels(61, 77, 4, Texture), 61, 77,
                                   PNG_FORMAT_RGBA));
  out.push_back(testing::EncodeWebp(testing::MakePixels(90, 33, 3, Texture), 90, 33, 3, 80));
  return out;
}

constexpr int kSlot = 0;
// Batch rows: 0 pixel_values (ragged), 1 its lengths, 2 image_grid_thw (one per item).
constexpr int kPixels = 0;
constexpr int kGrid = 2;

std::vector<std::unique_ptr<Op>> QwenChain() {
  std::vector<std::unique_ptr<Op>> ops;
  ops.push_back(std::make_unique<DecodeOp>(DecodeSpec{}, DecodeTarget{}, kSlot));
  ops.push_back(std::make_unique<SmartResizeOp>(
      SmartResizeSpec{.preset = VisionModel::kQwen2Vl, .min_pixels = 56 * 56}, kSlot));
  ops.push_back(std::make_unique<PatchifyOp>(
      *PatchifyKernel::Make(ResolvePatchify(PatchifySpec{.preset = VisionModel::kQwen2Vl})),
      kSlot, kPixels, kGrid));
  return ops;
}

std::vector<FieldSpec> Fields() {
  return {FieldSpec{"pixel_values", DType::kF32, {1176}, FieldLayout::kRagged},
          FieldSpec{"pixel_values_lengths", DType::kI32, {}, FieldLayout::kLengths},
          FieldSpec{"image_grid_thw", DType::kI64, {3}, FieldLayout::kItems}};
}

TEST(SizePass, DecodeSmartResizeAndPatchifyTellTheRowsTheyAppend) {
  const std::vector<std::unique_ptr<Op>> ops = QwenChain();
  for (const Bytes& bytes : Images()) {
    testing::TestContext t;
    t.SetMedia(bytes);
    RaggedRows ragged(Fields(), std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {}));
    int64_t grid[3] = {};
    t.SetRows({nullptr, nullptr, reinterpret_cast<uint8_t*>(grid)});
    t.ctx.ragged = &ragged;

    std::vector<SizePass::Size> images(t.values.size());
    std::vector<int64_t> rows(3);
    SizePass pass{&t.ctx, images, rows};
    for (const auto& op : ops) ASSERT_TRUE(op->Predict(pass)) << op->name();
    const SizePass::Size told = images[kSlot];
    for (const auto& op : ops) ASSERT_TRUE(op->Run(t.ctx).ok()) << op->name();

    EXPECT_EQ(rows[kPixels], ragged.rows(kPixels));
    EXPECT_EQ(rows[kPixels], grid[0] * grid[1] * grid[2]);
    EXPECT_EQ(told.width, t.image().width);
    EXPECT_EQ(told.height, t.image().height);
  }
}

// Appends nothing and cannot tell (text.tokenize's place in a chain: after patchify).
class Opaque final : public Op {
 public:
  std::string_view name() const override { return "opaque"; }
  Status Run(SampleContext&) const override { return Status::Ok(); }
};

TEST(SizePass, AnOpThatCannotTellAndBytesThatAreNoImageSizeNothing) {
  const std::vector<std::unique_ptr<Op>> ops = QwenChain();
  testing::TestContext t;
  t.SetMedia(Bytes{'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  std::vector<SizePass::Size> images(t.values.size());
  std::vector<int64_t> rows(3);
  SizePass pass{&t.ctx, images, rows};
  EXPECT_FALSE(ops[0]->Predict(pass)) << "a header that does not parse";
  EXPECT_FALSE(ops[1]->Predict(pass)) << "no image before it";
  EXPECT_FALSE(ops[2]->Predict(pass));
  EXPECT_EQ(rows[kPixels], 0);
  // An op without a Predict (the default) cannot tell.
  EXPECT_FALSE(Opaque().Predict(pass));
}

// A sample of `items` in the list field 1, run through a chain (ChainRunner: the size
// pass, then the ops).
struct ListSample {
  SampleRecord record;
  Sample sample;
  std::vector<Value> values = std::vector<Value>(1);
  ScratchArena scratch;
  FitCountingAllocator counting;
  RaggedRows ragged{Fields(), std::shared_ptr<Allocator>(&counting, [](Allocator*) {})};

  explicit ListSample(const std::vector<Bytes>& items) {
    record.media.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      record.media.push_back(MediaRef{1, "image" + std::to_string(i), 0, -1});
      sample.media.push_back(
          Sample::Item{1, *Buffer::CopyOf(items[i].data(), items[i].size()), record.media[i].uri});
    }
    sample.record = &record;
  }
  Status Run(std::span<const std::unique_ptr<Op>> chain) {
    std::vector<uint8_t*> rows(3, nullptr);
    const ChainRunner runner(chain, {}, 1, 0);
    return runner.Run(sample, rows.data(), &ragged, scratch, values,
                      [](size_t, auto, auto, const SampleContext&) {});
  }
};

// The chain [ForEachItemOp of `ops`, then `after`...].
std::vector<std::unique_ptr<Op>> ImageList(std::vector<std::unique_ptr<Op>> ops,
                                           bool opaque_after = false) {
  ForEachItemOp::Options o;
  o.list = "images";
  o.source_field = 1;
  o.slot = kSlot;
  o.max_items = 8;
  o.fields = {ForEachItemOp::ItemField{kGrid, 3 * sizeof(int64_t), false}};
  std::vector<std::unique_ptr<Op>> chain;
  chain.push_back(std::make_unique<ForEachItemOp>(std::move(o), std::move(ops)));
  if (opaque_after) chain.push_back(std::make_unique<Opaque>());
  return chain;
}

TEST(SizePass, AListsPatchesTakeOneBlockOfTheirTotalSizeAndAreTheSameAsGrownOnes) {
  const std::vector<Bytes> images = Images();
  // An op after the list that cannot tell (text.tokenize's place) stops the pass after it.
  const auto sized = ImageList(QwenChain(), /*opaque_after=*/true);
  ListSample a(images);
  ASSERT_TRUE(a.Run(sized).ok());
  const size_t pixel_bytes = static_cast<size_t>(a.ragged.rows(kPixels)) * 1176 * sizeof(float);
  EXPECT_EQ(a.counting.final,
            (std::vector<size_t>{pixel_bytes, images.size() * 3 * sizeof(int64_t)}))
      << "the patches of all " << images.size() << " images, then their grids";
  EXPECT_TRUE(a.counting.growing.empty()) << "nothing grew";
  EXPECT_EQ(a.ragged.held_bytes(), pixel_bytes + images.size() * 3 * sizeof(int64_t));

  // An op that cannot tell inside the list (last of each item's, so the rows are the
  // same): the pass stops at the first item's, the first image's patches reserved (a
  // lower bound), the others grown onto them image by image, to the same bytes.
  std::vector<std::unique_ptr<Op>> ops = QwenChain();
  ops.push_back(std::make_unique<Opaque>());
  const auto grown = ImageList(std::move(ops));
  ListSample b(images);
  ASSERT_TRUE(b.Run(grown).ok());
  ASSERT_EQ(b.counting.final.size(), 1u);
  EXPECT_EQ(b.counting.final[0], static_cast<size_t>(b.ragged.lengths(kPixels)[0]) * 1176 * 4);
  EXPECT_GT(b.counting.growing.size(), 1u);
  for (int field : {kPixels, kGrid}) {
    const std::span<const uint8_t> x = a.ragged.bytes(field), y = b.ragged.bytes(field);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << "field " << field;
  }
  const auto lengths = [](const RaggedRows& r) {
    return std::vector<int32_t>(r.lengths(kPixels).begin(), r.lengths(kPixels).end());
  };
  EXPECT_EQ(lengths(a.ragged), lengths(b.ragged));

  // An item that is no image: the pass stops there, and the run fails on that item.
  std::vector<Bytes> bad = images;
  bad.insert(bad.begin(), Bytes{'x', 'y'});
  ListSample c(bad);
  const Status s = c.Run(sized);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("images[0]"), std::string::npos) << s.message();
  EXPECT_TRUE(c.counting.final.empty());
}

TEST(SizePass, OneImagesPatchesAreReservedBeforeTheOpsThatCannotTell) {
  // The chain of examples/qwen2_vl.yaml: decode, smart_resize, patchify, then the
  // tokenizer, which cannot tell; one image per sample, not a list.
  std::vector<std::unique_ptr<Op>> chain = QwenChain();
  chain.push_back(std::make_unique<Opaque>());
  for (const Bytes& bytes : Images()) {
    testing::TestContext t;
    t.SetMedia(bytes);
    FitCountingAllocator counting;
    RaggedRows ragged(Fields(), std::shared_ptr<Allocator>(&counting, [](Allocator*) {}));
    int64_t grid[3] = {};
    std::vector<uint8_t*> rows = {nullptr, nullptr, reinterpret_cast<uint8_t*>(grid)};
    const std::vector<SourceValue> sources = {SourceValue{SourceValue::From::kMedia, 0, kSlot}};
    const ChainRunner runner(chain, sources, 1, 0);
    std::vector<Value> values;
    ASSERT_TRUE(runner.Run(t.sample, rows.data(), &ragged, t.scratch, values,
                           [](size_t, auto, auto, const SampleContext&) {})
                    .ok());
    const size_t bytes_told = static_cast<size_t>(grid[0] * grid[1] * grid[2]) * 1176 * 4;
    EXPECT_EQ(counting.final, std::vector<size_t>{bytes_told});
    EXPECT_TRUE(counting.growing.empty());
    EXPECT_EQ(ragged.held_bytes(), bytes_told);
  }
}

}  // namespace
}  // namespace size_pass_test
}  // namespace headrace
