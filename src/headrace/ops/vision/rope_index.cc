#include "headrace/ops/vision/rope_index.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "headrace/ops/schema.h"

namespace headrace {

namespace {

// transformers' mm_token_type_ids: text 0, image 1, video 2.
enum class TokenType { kText, kImage, kVideo };

std::string Thw(std::span<const int64_t> g) {
  return "(" + std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) +
         ")";
}

}  // namespace

Result<int64_t> RopeIndex(const RopeIndexParams& p, std::span<const int64_t> ids,
                          std::span<const int64_t> image_thw, std::span<const int64_t> video_thw,
                          std::span<const float> seconds_per_grid, std::span<int64_t> out,
                          std::string_view image_field, std::string_view video_field) {
  const size_t n = ids.size();
  if (out.size() < 3 * n) return Status::Internal("RopeIndex: output smaller than 3 per token");
  const auto type_of = [&](int64_t id) {
    return id == p.image_token_id   ? TokenType::kImage
           : id == p.video_token_id ? TokenType::kVideo
                                    : TokenType::kText;
  };
  const int64_t merge = p.merge_size;
  const bool split_frames = p.model == VisionModel::kQwen3Vl;
  const size_t images = image_thw.size() / 3, videos = video_thw.size() / 3;
  size_t image = 0, video = 0;
  int64_t frame = 0;  // qwen3_vl: the next frame of video `video`
  int64_t cur = 0;    // where the next block starts
  int64_t max_pos = -1;
  int64_t* o = out.data();
  for (size_t i = 0; i < n;) {
    const TokenType type = type_of(ids[i]);
    size_t j = i + 1;
    while (j < n && type_of(ids[j]) == type) ++j;
    const int64_t len = static_cast<int64_t>(j - i);
    if (type == TokenType::kText) {
      for (int64_t k = 0; k < len; ++k, o += 3) o[0] = o[1] = o[2] = cur + k;
      cur += len;
      max_pos = std::max(max_pos, cur - 1);
      i = j;
      continue;
    }
    const bool is_video = type == TokenType::kVideo;
    const std::string_view field = is_video ? video_field : image_field;
    const size_t have = is_video ? videos : images;
    const size_t index = is_video ? video : image;
    if (index >= have) {
      return Status::InvalidArgument(
          "vision.rope_index: the tokens hold more " +
          std::string(is_video ? "video" : "image") + " blocks than the sample's " +
          std::to_string(have) + " grid" + (have == 1 ? "" : "s") + " in " + std::string(field));
    }
    const std::span<const int64_t> g = (is_video ? video_thw : image_thw).subspan(3 * index, 3);
    if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[1] % merge != 0 || g[2] % merge != 0) {
      return Status::InvalidArgument("vision.rope_index: " + std::string(field) + "[" +
                                     std::to_string(index) + "] = " + Thw(g) +
                                     " is not a grid of merge_size " + std::to_string(merge));
    }
    const int64_t t = is_video && split_frames ? 1 : g[0];
    const int64_t h = g[1] / merge, w = g[2] / merge;
    if (len != t * h * w) {
      return Status::InvalidArgument(
          "vision.rope_index: " + std::string(is_video ? "video" : "image") + " block " +
          std::to_string(index) + (is_video && split_frames ? " frame " + std::to_string(frame) : "") +
          " is " + std::to_string(len) + " tokens, but its grid " + std::string(field) + "[" +
          std::to_string(index) + "] = " + Thw(g) + " has " + std::to_string(t * h * w));
    }
    // Temporal positions as transformers makes them: (arange(t) * interval).long(), the
    // product in float32 (an int64 arange times a float32 scalar) for qwen2_5_vl's videos.
    float interval = 1;
    if (is_video && p.model == VisionModel::kQwen2_5Vl) {
      const float seconds = index < seconds_per_grid.size() ? seconds_per_grid[index] : 1.0f;
      interval = p.tokens_per_second * seconds;
    }
    for (int64_t ti = 0; ti < t; ++ti) {
      const int64_t tp =
          cur + (interval == 1 ? ti : static_cast<int64_t>(static_cast<float>(ti) * interval));
      max_pos = std::max(max_pos, tp);
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x, o += 3) {
          o[0] = tp;
          o[1] = cur + y;
          o[2] = cur + x;
        }
      }
    }
    max_pos = std::max(max_pos, cur + std::max(h, w) - 1);
    cur += std::max(g[1], g[2]) / merge;
    if (!is_video) {
      ++image;
    } else if (split_frames && ++frame < g[0]) {
      // the next block is this video's next frame
    } else {
      ++video;
      frame = 0;
    }
    i = j;
  }
  if (image != images || video != videos) {
    const bool short_images = image != images;
    return Status::InvalidArgument(
        "vision.rope_index: the sample has " + std::to_string(short_images ? images : videos) +
        (short_images ? " image" : " video") + " grid" +
        ((short_images ? images : videos) == 1 ? "" : "s") + " in " +
        std::string(short_images ? image_field : video_field) + " but its tokens hold " +
        std::to_string(short_images ? image : video) + " such blocks" +
        (!short_images && frame > 0
             ? " (and " + std::to_string(frame) + " of the next one's frames)"
             : ""));
  }
  return n == 0 ? 0 : max_pos + 1 - static_cast<int64_t>(n);
}

RopeIndexParams ResolveRopeIndex(const RopeIndexSpec& spec) {
  RopeIndexParams params;
  params.model = spec.preset == VisionModel::kNone ? VisionModel::kQwen2Vl : spec.preset;
  params.merge_size = spec.merge_size;
  const VisionTokens tokens;
  params.image_token_id = tokens.image_pad_id;
  params.video_token_id = tokens.video_pad_id;
  if (const VisionPreset* p = FindVisionPreset(spec.preset)) {
    if (spec.merge_size == 0) params.merge_size = p->merge_size;
    params.image_token_id = p->tokens.image_pad_id;
    params.video_token_id = p->tokens.video_pad_id;
  }
  if (spec.image_token_id >= 0) params.image_token_id = spec.image_token_id;
  if (spec.video_token_id >= 0) params.video_token_id = spec.video_token_id;
  // Qwen/Qwen2.5-VL-*-Instruct's config.json: vision_config.tokens_per_second 2 (the
  // config class's default is 4).
  params.tokens_per_second = spec.tokens_per_second > 0 ? static_cast<float>(spec.tokens_per_second)
                                                        : 2.0f;
  return params;
}

Status RopeIndexOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".preset", s.preset));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".dtype", s.dtype));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".merge_size", s.merge_size, 0, 64));
  HR_RETURN_IF_ERROR(schema::AtLeast(p + ".image_token_id", s.image_token_id, -1));
  HR_RETURN_IF_ERROR(schema::AtLeast(p + ".video_token_id", s.video_token_id, -1));
  const RopeIndexParams params = ResolveRopeIndex(s);
  if (params.image_token_id == params.video_token_id) {
    return schema::Invalid(p + ".video_token_id",
                           "must differ from image_token_id (both " +
                               std::to_string(params.image_token_id) + ")");
  }
  HR_RETURN_IF_ERROR(schema::FiniteInRange(p + ".tokens_per_second", s.tokens_per_second, 0, 1e6));
  HR_RETURN_IF_ERROR(schema::FiniteInRange(p + ".seconds_per_grid", s.seconds_per_grid, 0, 1e6));
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".input_ids", s.input_ids, "text.tokenize's token field"));
  if (s.grid_field.empty() && s.video_grid_field.empty()) {
    return schema::Invalid(p + ".grid_field",
                           "name the image grids (vision.patchify's grid_output), the video "
                           "grids (video_grid_field), or both");
  }
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".output", s.output, "the position ids field"));
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".deltas_output", s.deltas_output, "the deltas field"));
  if (s.output == s.deltas_output) {
    return schema::Invalid(p + ".deltas_output", "must differ from output (both '" + s.output + "')");
  }
  return Status::Ok();
}

namespace {

using Grids = RopeIndexOp::Grids;

// Where the grids of `name` are (key: the parameter naming it), with the checks of
// Declare: an i64 (t, h, w) per image, from a writer whose merge size agrees with `mine`.
Result<Grids> ReadGrids(const std::string& name, const std::string& key,
                        const PatchGeometry& mine, PlanContext& ctx, int* writer_merge) {
  Grids grids;
  if (name.empty()) return grids;
  const FieldSpec synthetic{name, DType::kI64, {3}, FieldLayout::kRagged};
  HR_ASSIGN_OR_RETURN(FieldRead field, ctx.ReadField(name, &synthetic));
  const std::vector<int64_t>& shape = field.spec.sample_shape;
  const bool fixed = field.spec.layout == FieldLayout::kFixed;
  const bool padded = fixed && field.items > 0;
  const std::vector<int64_t> want =
      padded ? std::vector<int64_t>{field.items, 3} : std::vector<int64_t>{3};
  if (field.spec.dtype != DType::kI64 || shape != want ||
      (!fixed && field.spec.layout != FieldLayout::kItems &&
       field.spec.layout != FieldLayout::kRagged)) {
    return ctx.Error(key + " '" + name + "' (from " + field.writer +
                     ") is not an i64 (t, h, w) per image, as vision.patchify's grid_output is");
  }
  HR_RETURN_IF_ERROR(CheckSameGeometry(
      mine, field.geometry,
      "the grids of '" + name + "' are merged " + std::to_string(field.geometry.merge_size) +
          "x" + std::to_string(field.geometry.merge_size) + " per token"));
  if (*writer_merge == 0) *writer_merge = field.geometry.merge_size;
  grids.layout = padded ? Grids::Layout::kPadded : fixed ? Grids::Layout::kOne
                                                         : Grids::Layout::kAppended;
  grids.row = field.row;
  grids.max_items = field.items;
  grids.field = name;
  return grids;
}

struct Inputs {
  RopeIndexOp::Rows rows;
  Grids images, videos;
  int merge_size = 2;
};

// What Declare checks and Make needs: the fields read back, their layouts and rows.
Result<Inputs> ReadInputs(const RopeIndexSpec& spec, PlanContext& ctx) {
  Inputs in;
  const FieldSpec synthetic_ids{spec.input_ids, DType::kI64, {}, FieldLayout::kRagged};
  HR_ASSIGN_OR_RETURN(FieldRead ids, ctx.ReadField(spec.input_ids, &synthetic_ids));
  const bool ragged = ids.spec.layout == FieldLayout::kRagged && ids.spec.sample_shape.empty();
  const bool fixed = ids.spec.layout == FieldLayout::kFixed && ids.spec.sample_shape.size() == 1;
  if (ids.spec.dtype != DType::kI64 || ids.items > 0 || (!ragged && !fixed)) {
    return ctx.Error("input_ids '" + spec.input_ids + "' (from " + ids.writer +
                     ") is not i64 tokens per sample, as text.tokenize's input_ids are "
                     "(ragged with pad: false, [max_length] with pad: true)");
  }
  in.rows.input_ids = ids.row;
  if (fixed) {
    in.rows.length = ids.spec.sample_shape[0];
    if (spec.attention_mask.empty()) {
      return ctx.Error("attention_mask: needed with a padded input_ids ('" + spec.input_ids +
                       "' is [" + std::to_string(in.rows.length) +
                       "] per sample): which of its tokens are the sample's");
    }
    HR_ASSIGN_OR_RETURN(FieldRead mask, ctx.ReadField(spec.attention_mask));
    if (mask.spec.dtype != DType::kI64 || mask.spec.layout != FieldLayout::kFixed ||
        mask.spec.sample_shape != ids.spec.sample_shape) {
      return ctx.Error("attention_mask '" + spec.attention_mask + "' (from " + mask.writer +
                       ") is not i64 [" + std::to_string(in.rows.length) + "] as input_ids '" +
                       spec.input_ids + "' is");
    }
    in.rows.attention_mask = mask.row;
  }
  const RopeIndexParams params = ResolveRopeIndex(spec);
  const PatchGeometry mine{0, params.merge_size, ctx.key(),
                           std::string(PresetOfSizes(spec.preset, 0, spec.merge_size))};
  int writer_merge = 0;
  HR_ASSIGN_OR_RETURN(in.images, ReadGrids(spec.grid_field, "grid_field", mine, ctx, &writer_merge));
  HR_ASSIGN_OR_RETURN(in.videos, ReadGrids(spec.video_grid_field, "video_grid_field", mine, ctx,
                                           &writer_merge));
  in.merge_size = params.merge_size > 0 ? params.merge_size : writer_merge > 0 ? writer_merge : 2;
  return in;
}

DType DTypeOf(RopeIdType t) { return t == RopeIdType::kI32 ? DType::kI32 : DType::kI64; }

}  // namespace

Status RopeIndexOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(Inputs in, ReadInputs(spec, ctx));
  if (in.rows.attention_mask >= 0) {
    ctx.AddField(FieldSpec{spec.output, DTypeOf(spec.dtype), {in.rows.length, 3}},
                 ctx.key() + " (input_ids '" + spec.input_ids + "' is [" +
                     std::to_string(in.rows.length) + "] per sample)");
  } else {
    ctx.AddField(FieldSpec{spec.output, DTypeOf(spec.dtype), {3}, FieldLayout::kRagged, "",
                           spec.input_ids},
                 ctx.key() + " (one (t, h, w) per token of '" + spec.input_ids + "')");
  }
  ctx.AddField(FieldSpec{spec.deltas_output, DType::kI64, {1}}, ctx.key() + " (one per sample)");
  return Status::Ok();
}

Result<std::unique_ptr<Op>> RopeIndexOp::Make(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(Inputs in, ReadInputs(spec, ctx));
  RopeIndexParams params = ResolveRopeIndex(spec);
  params.merge_size = in.merge_size;
  in.rows.output = ctx.row(spec.output);
  in.rows.deltas = ctx.row(spec.deltas_output);
  return std::unique_ptr<Op>(std::make_unique<RopeIndexOp>(
      params, in.rows, std::move(in.images), std::move(in.videos),
      static_cast<float>(spec.seconds_per_grid), spec.dtype));
}

RopeIndexOp::RopeIndexOp(RopeIndexParams params, Rows rows, Grids images, Grids videos,
                         float seconds_per_grid, RopeIdType dtype)
    : params_(params),
      rows_(rows),
      images_(std::move(images)),
      videos_(std::move(videos)),
      seconds_per_grid_(seconds_per_grid),
      dtype_(dtype) {}

namespace {

// This sample's grids, as the op before wrote them (Grids::Layout).
Result<std::span<const int64_t>> SampleGrids(const SampleContext& ctx, const Grids& grids) {
  switch (grids.layout) {
    case Grids::Layout::kNone: return std::span<const int64_t>{};
    case Grids::Layout::kOne:
      return std::span<const int64_t>{reinterpret_cast<const int64_t*>(ctx.rows[grids.row]), 3};
    case Grids::Layout::kPadded: {
      const auto* row = reinterpret_cast<const int64_t*>(ctx.rows[grids.row]);
      size_t n = 0;
      while (n < static_cast<size_t>(grids.max_items) && row[3 * n] != 0) ++n;
      return std::span<const int64_t>{row, 3 * n};
    }
    case Grids::Layout::kAppended: {
      if (ctx.ragged == nullptr) return Status::Internal("vision.rope_index: no appended grids");
      const std::span<const uint8_t> bytes = ctx.ragged->bytes(grids.row);
      return std::span<const int64_t>{reinterpret_cast<const int64_t*>(bytes.data()),
                                      bytes.size() / sizeof(int64_t)};
    }
  }
  return Status::Internal("vision.rope_index: unknown grid layout");
}

}  // namespace

Status RopeIndexOp::Run(SampleContext& ctx) const {
  if (ctx.rows == nullptr) return Status::Internal("vision.rope_index: context without batch rows");
  // The sample's tokens: its appended rows, or with padded input_ids those its mask marks
  // (transformers' get_rope_index with attention_mask: positions of the rest are 0).
  thread_local std::vector<int64_t> gathered, positions;
  std::span<const int64_t> ids;
  const auto* mask =
      rows_.attention_mask >= 0 ? reinterpret_cast<const int64_t*>(ctx.rows[rows_.attention_mask])
                                : nullptr;
  if (mask != nullptr) {
    const auto* row = reinterpret_cast<const int64_t*>(ctx.rows[rows_.input_ids]);
    gathered.clear();
    for (int64_t i = 0; i < rows_.length; ++i) {
      if (mask[i] != 0) gathered.push_back(row[i]);
    }
    ids = gathered;
  } else {
    if (ctx.ragged == nullptr) return Status::Internal("vision.rope_index: no ragged input_ids");
    const std::span<const uint8_t> bytes = ctx.ragged->bytes(rows_.input_ids);
    ids = {reinterpret_cast<const int64_t*>(bytes.data()), bytes.size() / sizeof(int64_t)};
  }
  HR_ASSIGN_OR_RETURN(std::span<const int64_t> image_thw, SampleGrids(ctx, images_));
  HR_ASSIGN_OR_RETURN(std::span<const int64_t> video_thw, SampleGrids(ctx, videos_));
  thread_local std::vector<float> seconds;
  seconds.assign(video_thw.size() / 3, seconds_per_grid_);
  positions.resize(3 * ids.size());
  HR_ASSIGN_OR_RETURN(const int64_t delta,
                      RopeIndex(params_, ids, image_thw, video_thw, seconds, positions,
                                images_.field, videos_.field));
  std::memcpy(ctx.rows[rows_.deltas], &delta, sizeof delta);

  // Where the positions go: the sample's appended rows, or its fixed [length, 3] row.
  const int64_t rows_out = mask != nullptr ? rows_.length : static_cast<int64_t>(ids.size());
  uint8_t* out = nullptr;
  if (mask != nullptr) {
    out = ctx.rows[rows_.output];
  } else {
    HR_ASSIGN_OR_RETURN(out, ctx.AppendRows(rows_.output, rows_out));
  }
  const auto write = [&](auto* dst) {
    using T = std::remove_pointer_t<decltype(dst)>;
    if (mask == nullptr) {
      for (size_t i = 0; i < positions.size(); ++i) dst[i] = static_cast<T>(positions[i]);
      return;
    }
    size_t k = 0;
    for (int64_t i = 0; i < rows_.length; ++i) {
      for (int d = 0; d < 3; ++d) {
        dst[3 * i + d] = mask[i] != 0 ? static_cast<T>(positions[3 * k + d]) : T{0};
      }
      if (mask[i] != 0) ++k;
    }
  };
  if (dtype_ == RopeIdType::kI32) {
    write(reinterpret_cast<int32_t*>(out));
  } else {
    write(reinterpret_cast<int64_t*>(out));
  }
  return Status::Ok();
}

}  // namespace headrace
