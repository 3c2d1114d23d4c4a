#include "headrace/ops/vision/patchify_op.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "headrace/ops/image/image.h"
#include "headrace/ops/image/smart_resize.h"

namespace headrace {
namespace patchify_op_test {
namespace {

// Rows 0: pixel_values (ragged), 1: its lengths, 2: image_grid_thw, as Declare adds them.
struct Fixture {
  std::vector<FieldSpec> fields;
  RaggedRows ragged;
  int64_t grid[3] = {-1, -1, -1};
  std::vector<uint8_t*> rows;
  std::vector<Value> values = std::vector<Value>(1);
  ScratchArena scratch;
  SampleContext ctx;

  explicit Fixture(int64_t patch_dim)
      : fields{FieldSpec{"pixel_values", DType::kF32, {patch_dim}, FieldLayout::kRagged},
               FieldSpec{"pixel_values_lengths", DType::kI32, {}, FieldLayout::kLengths},
               FieldSpec{"image_grid_thw", DType::kI64, {3}}},
        ragged(fields, std::shared_ptr<Allocator>(DefaultAllocator(), [](Allocator*) {})) {
    rows = {nullptr, nullptr, reinterpret_cast<uint8_t*>(grid)};
    ctx.scratch = &scratch;
    ctx.values = values;
    ctx.rows = rows.data();
    ctx.ragged = &ragged;
  }
  std::vector<float> Pixels() const {
    const auto bytes = ragged.bytes(0);
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
};

Image Gradient(int w, int h, int channels) {
  Image image = *Image::Allocate(w, h, channels);
  MutableImageView v = image.mutable_view();
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        v.row(y)[x * channels + c] = static_cast<uint8_t>(64 * c + 8 * y + x);
      }
    }
  }
  return image;
}

PatchifySpec Identity(int p, int m) {
  return PatchifySpec{.patch_size = p, .temporal_patch_size = 2, .merge_size = m,
                      .mean = std::array<float, 3>{0, 0, 0},
                      .std = std::array<float, 3>{1, 1, 1}};
}

PatchifyOp MakeOp(const PatchifySpec& spec) {
  return PatchifyOp(*PatchifyKernel::Make(ResolvePatchify(spec)), 0, 0, 2);
}

TEST(PatchifyOp, AppendsTheImagesPatchesInMergeWindowOrderAndWritesItsGrid) {
  // 8x4, P = 2, M = 2, T = 2: a 2x4 patch grid, two merge windows side by side.
  const Image image = Gradient(8, 4, 4);
  const PatchifyOp op = MakeOp(Identity(2, 2));
  Fixture f(3 * 2 * 2 * 2);
  f.values[0] = image.view();
  ASSERT_TRUE(op.Run(f.ctx).ok());
  EXPECT_EQ(std::vector<int64_t>(f.grid, f.grid + 3), (std::vector<int64_t>{1, 2, 4}));
  ASSERT_EQ(f.ragged.rows(0), 8);
  ASSERT_EQ(f.ragged.lengths(0).size(), 1u);
  const std::vector<float> px = f.Pixels();
  // Row r, column (c, k, py, px): window r / 4, patch r % 4 of it (row-major 2x2).
  for (int r = 0; r < 8; ++r) {
    const int window = r / 4, mh = (r % 4) / 2, mw = r % 2;
    const int x0 = (window * 2 + mw) * 2, y0 = mh * 2;
    int col = 0;
    for (int c = 0; c < 3; ++c) {
      for (int k = 0; k < 2; ++k) {  // the still image repeated to T = 2
        for (int py = 0; py < 2; ++py) {
          for (int pxx = 0; pxx < 2; ++pxx, ++col) {
            const float want = (64 * c + 8 * (y0 + py) + x0 + pxx) / 255.0f;
            EXPECT_NEAR(px[static_cast<size_t>(r * 24 + col)], want, 1e-6) << r << " " << col;
          }
        }
      }
    }
  }
  // A second image of the sample (a list's next item) is a second entry.
  const Image other = Gradient(4, 4, 1);
  f.values[0] = other.view();
  ASSERT_TRUE(op.Run(f.ctx).ok());
  EXPECT_EQ(std::vector<int64_t>(f.grid, f.grid + 3), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(std::vector<int32_t>(f.ragged.lengths(0).begin(), f.ragged.lengths(0).end()),
            (std::vector<int32_t>{8, 4}));
}

TEST(PatchifyOp, ASideThatIsNotAMultipleFailsTheSampleNamingTheSize) {
  const PatchifyOp op = MakeOp(Identity(2, 2));
  Fixture f(24);
  const Image image = Gradient(8, 6, 3);
  f.values[0] = image.view();
  const Status s = op.Run(f.ctx);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("image 8x6"), std::string::npos) << s.message();
  EXPECT_EQ(f.ragged.rows(0), 0) << "nothing appended";
  f.values[0] = Value();
  EXPECT_EQ(op.Run(f.ctx).code(), StatusCode::kInternal);
}

TEST(PatchifyOp, APresetSetsEveryKeyAndExplicitKeysOverrideIt) {
  PatchifySpec spec{.preset = VisionModel::kQwen3Vl};
  PatchifyParams p = ResolvePatchify(spec);
  EXPECT_EQ(p.patch_size, 16);
  EXPECT_EQ(p.temporal_patch_size, 2);
  EXPECT_EQ(p.merge_size, 2);
  EXPECT_EQ(p.mean[0], 0.5f);
  spec.patch_size = 14;
  spec.std = std::array<float, 3>{1, 1, 1};
  p = ResolvePatchify(spec);
  EXPECT_EQ(p.patch_size, 14);
  EXPECT_EQ(p.std[2], 1.0f);
  EXPECT_EQ(p.mean[0], 0.5f) << "the preset's mean stays";
  const PatchifyParams plain = ResolvePatchify(PatchifySpec{});
  EXPECT_EQ(plain.patch_size, 14);
  EXPECT_EQ(plain.mean, kOpenAiClipMean);
}

TEST(PatchifyOp, ValidateNamesTheKey) {
  const auto message = [](const PatchifySpec& s) {
    return PatchifyOp::Validate(s, "ops[3].vision.patchify").message();
  };
  PatchifySpec s;
  s.std = std::array<float, 3>{1, 0, 1};
  EXPECT_NE(message(s).find("ops[3].vision.patchify.std[1]"), std::string::npos) << message(s);
  s = PatchifySpec{.grid_output = "pixel_values"};
  EXPECT_NE(message(s).find(".grid_output: must differ from output"), std::string::npos)
      << message(s);
  s = PatchifySpec{.merge_size = 65};
  EXPECT_NE(message(s).find(".merge_size"), std::string::npos);
  s = PatchifySpec{.dtype = DType::kU8};
  EXPECT_NE(message(s).find(".dtype"), std::string::npos);
  EXPECT_TRUE(PatchifyOp::Validate(PatchifySpec{}, "p").ok());
}

// --- plan time --------------------------------------------------------------------------

struct Planned {
  PlanState state;
  Status status;
};

// Declares `image.smart_resize` (when given) then vision.patchify on a synthesized image.
Planned Declare(std::optional<SmartResizeSpec> resize, const PatchifySpec& patchify) {
  Planned p;
  p.state.synthesize_inputs = true;
  p.state.ops.resize(2);
  p.state.ops[0].key = "ops[1].image.smart_resize";
  p.state.ops[1].key = "ops[2].vision.patchify";
  if (resize) {
    PlanContext ctx(p.state, 0);
    p.status = SmartResizeOp::Declare(*resize, ctx);
    if (!p.status.ok()) return p;
  }
  PlanContext ctx(p.state, 1);
  p.status = PatchifyOp::Declare(patchify, ctx);
  return p;
}

TEST(PatchifyPlan, DeclaresRaggedPixelValuesAndAGridPerImage) {
  const Planned p = Declare(SmartResizeSpec{.preset = VisionModel::kQwen2Vl},
                            PatchifySpec{.preset = VisionModel::kQwen2Vl});
  ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  ASSERT_EQ(p.state.fields.size(), 3u);
  EXPECT_EQ(p.state.fields[0].name, "pixel_values");
  EXPECT_EQ(p.state.fields[0].layout, FieldLayout::kRagged);
  EXPECT_EQ(p.state.fields[0].sample_shape, (std::vector<int64_t>{3 * 2 * 14 * 14}));
  EXPECT_EQ(p.state.fields[1].name, "pixel_values_lengths");
  EXPECT_EQ(p.state.fields[2].name, "image_grid_thw");
  EXPECT_EQ(p.state.fields[2].layout, FieldLayout::kFixed);
  EXPECT_EQ(p.state.fields[2].sample_shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(p.state.ops[1].geometry.patch_size, 14);
  EXPECT_EQ(p.state.ops[1].geometry.preset, "qwen2_vl");
}

TEST(PatchifyPlan, SizesThatDisagreeWithSmartResizeNameBothKeys) {
  Planned p = Declare(SmartResizeSpec{.preset = VisionModel::kQwen2Vl},
                      PatchifySpec{.preset = VisionModel::kQwen3Vl});
  ASSERT_FALSE(p.status.ok());
  EXPECT_EQ(p.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status.message().find(
                "ops[2].vision.patchify.patch_size 16 (preset qwen3_vl) disagrees with "
                "ops[1].image.smart_resize.patch_size 14 (preset qwen2_vl)"),
            std::string::npos)
      << p.status.message();
  p = Declare(SmartResizeSpec{.merge_size = 2}, PatchifySpec{.merge_size = 4});
  EXPECT_NE(p.status.message().find("ops[2].vision.patchify.merge_size 4 disagrees with "
                                    "ops[1].image.smart_resize.merge_size 2"),
            std::string::npos)
      << p.status.message();
  // Without smart_resize the synthesized 40x30 image is not a multiple of 28: said at plan
  // time, as its size is fixed.
  p = Declare(std::nullopt, PatchifySpec{});
  EXPECT_NE(p.status.message().find("the image is 40x30 here"), std::string::npos)
      << p.status.message();
  EXPECT_TRUE(Declare(std::nullopt, PatchifySpec{.patch_size = 5, .merge_size = 2}).status.ok());
}

TEST(PatchifyPlan, AResizeAfterSmartResizeLiftsItsGeometry) {
  Planned p;
  p.state.synthesize_inputs = true;
  p.state.ops.resize(3);
  p.state.ops[0].key = "ops[1].image.smart_resize";
  p.state.ops[1].key = "ops[2].image.resize";
  p.state.ops[2].key = "ops[3].vision.patchify";
  PlanContext a(p.state, 0);
  ASSERT_TRUE(SmartResizeOp::Declare(SmartResizeSpec{.patch_size = 14}, a).ok());
  PlanContext b(p.state, 1);
  ASSERT_TRUE(ResizeOp::Declare(ResizeSpec{.width = 64, .height = 64}, b).ok());
  PlanContext c(p.state, 2);
  // 64 = 16 * 2 * 2: patch 16 fits the resized image; smart_resize's 14 no longer applies.
  const Status s = PatchifyOp::Declare(PatchifySpec{.patch_size = 16}, c);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace patchify_op_test
}  // namespace headrace
