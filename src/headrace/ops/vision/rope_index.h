// vision.rope_index: a sample's 3-D M-RoPE position ids for Qwen2-VL / Qwen2.5-VL /
// Qwen3-VL, from its tokens (text.tokenize's input_ids) and its images' (and videos')
// grids (vision.patchify's image_grid_thw), as transformers'
// `Qwen2VLModel.get_rope_index` computes them for that sample alone:
//   <output>         mrope_position_ids, i64 (or i32) [tokens, 3]: (t, h, w) per token,
//                    ragged when input_ids is (text.tokenize pad: false), else fixed
//                    [max_length, 3] with zeros past the sample's tokens;
//   <deltas_output>  rope_deltas, i64 [1]: max position + 1 - tokens (the model's
//                    mrope_position_deltas row).
// The model wants position_ids as [3, batch, seq]: a batch's rows are token-major, so
// `ids.permute(2, 0, 1)` of the samples' [batch, seq, 3] (ops/vision/README.md).
//
// The rule (RopeIndex below): text tokens count on from the position after the last
// block in all three dimensions; a vision block of grid (t, h, w) - its
// t * (h / M) * (w / M) consecutive image or video tokens - gets, from start position
// p, (p + floor(i * interval), p + y, p + x) for temporal index i, row y, column x, and
// the text after it starts at p + max(h, w) / M. interval is 1, or for qwen2_5_vl's
// videos tokens_per_second * seconds per temporal grid; qwen3_vl splits each video
// into t blocks of one frame (its frames are separated by timestamps in the text).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "headrace/core/status.h"
#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/ops/vision/preset.h"

namespace headrace {

// The integer type of the position ids written.
enum class RopeIdType {
  kI64,  // "i64": the model's (position_ids are input_ids' dtype, int64)
  kI32,  // "i32": half the bytes; the model casts
};
inline EnumTable<RopeIdType> TableOf(RopeIdType) {
  static constexpr std::pair<RopeIdType, std::string_view> kNames[] = {
      {RopeIdType::kI64, "i64"}, {RopeIdType::kI32, "i32"}};
  return kNames;
}

// What RopeIndex needs to know of the model.
struct RopeIndexParams {
  // The rule: kQwen2Vl (also for kNone), kQwen2_5Vl (videos' temporal positions spaced
  // by tokens_per_second * seconds per grid), kQwen3Vl (videos split per frame).
  VisionModel model = VisionModel::kQwen2Vl;
  int merge_size = 2;                 // spatial_merge_size: h / M x w / M tokens a frame
  int64_t image_token_id = 151655;    // <|image_pad|>
  int64_t video_token_id = 151656;    // <|video_pad|>
  float tokens_per_second = 2;        // qwen2_5_vl only (vision_config.tokens_per_second)
};

// The position ids of the n tokens `ids`, token-major into `out` (3 * n values: t, h, w
// of token 0, then token 1, ...), and returns the sample's delta (max position + 1 - n;
// 0 for no tokens). `image_thw` and `video_thw` hold the sample's grids, 3 values each,
// in the order their blocks appear; `seconds_per_grid` one value per video (qwen2_5_vl;
// empty: 1 each, transformers' default without second_per_grid_ts).
// kInvalidArgument naming `image_field` / `video_field` when the blocks and the grids
// differ in number, a block is not its grid's t * (h / M) * (w / M) tokens long, or a
// grid is not positive with h and w multiples of M: the model would reject the batch
// (or, worse, silently misplace the images).
Result<int64_t> RopeIndex(const RopeIndexParams& params, std::span<const int64_t> ids,
                          std::span<const int64_t> image_thw, std::span<const int64_t> video_thw,
                          std::span<const float> seconds_per_grid, std::span<int64_t> out,
                          std::string_view image_field = "image_grid_thw",
                          std::string_view video_field = "video_grid_thw");

struct RopeIndexSpec {  // vision.rope_index
  // The model whose rule, token ids and merge size apply (RopeIndexParams); none: the
  // qwen2_vl rule, Qwen's token ids, merge_size from the grid's writer or 2.
  VisionModel preset = VisionModel::kNone;
  int merge_size = 0;             // 0: preset, the grid writer's, or 2
  int image_token_id = -1;        // -1: the preset's (Qwen's <|image_pad|>, 151655)
  int video_token_id = -1;        // -1: the preset's (Qwen's <|video_pad|>, 151656)
  double tokens_per_second = 0;   // 0: qwen2_5_vl's 2 (the Hub config.json's)
  double seconds_per_grid = 1.0;  // qwen2_5_vl videos: temporal_patch_size / fps
  std::string input_ids = "input_ids";  // text.tokenize's, ragged (pad: false) or fixed
  std::string attention_mask = "attention_mask";  // read only with a fixed input_ids
  std::string grid_field = "image_grid_thw";      // "": no images
  std::string video_grid_field{};                 // "": no videos
  RopeIdType dtype = RopeIdType::kI64;
  std::string output = "mrope_position_ids";
  std::string deltas_output = "rope_deltas";
};

// spec over its preset over the defaults; merge_size 0 stays 0 (the grid's writer's).
RopeIndexParams ResolveRopeIndex(const RopeIndexSpec& spec);

class RopeIndexOp : public Op {
 public:
  static constexpr std::string_view kName = "vision.rope_index";
  static constexpr std::string_view kDoc =
      "Qwen-VL 3-D M-RoPE position ids per sample from input_ids and the image/video grids: "
      "mrope_position_ids [tokens, 3], rope_deltas [1].";
  using Spec = RopeIndexSpec;
  static void Fields(auto& s, auto&& f) {
    f("preset", s.preset);
    f("merge_size", s.merge_size);
    f("image_token_id", s.image_token_id);
    f("video_token_id", s.video_token_id);
    f("tokens_per_second", s.tokens_per_second);
    f("seconds_per_grid", s.seconds_per_grid);
    f("input_ids", s.input_ids);
    f("attention_mask", s.attention_mask);
    f("grid_field", s.grid_field);
    f("video_grid_field", s.video_grid_field);
    f("dtype", s.dtype);
    f("output", s.output);
    f("deltas_output", s.deltas_output);
  }
  // merge_size in [0, 64], token ids -1 or >= 0 and distinct, tokens_per_second and
  // seconds_per_grid finite in [0, 1e6], a grid field named, outputs named and distinct.
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads back the batch fields input_ids (i64, ragged or fixed [L]; with fixed, also
  // attention_mask i64 [L]), grid_field and video_grid_field (i64 (t, h, w) per image, as
  // vision.patchify writes them) of earlier ops; writes output and deltas_output. A field
  // no earlier op writes, of another type or shape, or a grid writer whose merge size
  // differs from this op's explicit or preset one, is a config error naming the keys.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
  static Spec ExampleSpec() { return Spec{.preset = VisionModel::kQwen2Vl}; }

  // Where a sample's grids are, as the op reads them back (the layouts text.tokenize's
  // grid_field reads too).
  struct Grids {
    enum class Layout {
      kNone,      // no such field: the sample has none
      kOne,       // a fixed i64 [3]: one grid per sample, at ctx.rows[row]
      kPadded,    // a padded list's i64 [max_items, 3]; an item whose t is 0 is absent
      kAppended,  // a list's items or a ragged [?, 3]: ctx.ragged->bytes(row)
    };
    Layout layout = Layout::kNone;
    int row = -1;
    int max_items = 0;
    std::string field;  // for messages
  };
  struct Rows {
    int input_ids = -1;
    int attention_mask = -1;  // >= 0: input_ids is fixed [length], padded
    int64_t length = 0;       // the fixed input_ids' length
    int output = -1;
    int deltas = -1;
  };
  RopeIndexOp(RopeIndexParams params, Rows rows, Grids images, Grids videos,
              float seconds_per_grid, RopeIdType dtype);

  std::string_view name() const override { return kName; }
  // Errors as RopeIndex's (per sample); kInternal when the context lacks the rows.
  Status Run(SampleContext& ctx) const override;

 private:
  RopeIndexParams params_;
  Rows rows_;
  Grids images_;
  Grids videos_;
  float seconds_per_grid_;
  RopeIdType dtype_;
};

}  // namespace headrace
