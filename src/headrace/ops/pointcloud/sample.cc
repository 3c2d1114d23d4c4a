#include "headrace/ops/pointcloud/sample.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace headrace {
namespace {

constexpr std::pair<PointSelection, std::string_view> kSelections[] = {
    {PointSelection::kRandom, "random"}, {PointSelection::kFirst, "first"}};

std::string OutputOf(const PointSampleSpec& spec) {
  return spec.output.empty() ? spec.field : spec.output;
}

}  // namespace

EnumTable<PointSelection> TableOf(PointSelection) { return kSelections; }

Status PointSampleOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::InRange(p + ".points", s.points, 1, 1 << 24));
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".select", s.select));
  return schema::NonEmpty(p + ".field", s.field, "the point cloud to sample");
}

Status PointSampleOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_RETURN_IF_ERROR(ctx.Read(spec.field, ValueKind::kPoints).status());
  const std::string source = ctx.key() + ".points " + std::to_string(spec.points);
  ctx.AddField(FieldSpec{OutputOf(spec), DType::kF32, {spec.points, kPointChannels}}, source);
  ctx.AddField(FieldSpec{OutputOf(spec) + "_length", DType::kI64, {}}, source);
  return Status::Ok();
}

Result<std::unique_ptr<Op>> PointSampleOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<PointSampleOp>(
      spec, ctx.position(), ctx.slot(spec.field), ctx.row(OutputOf(spec)),
      ctx.row(OutputOf(spec) + "_length")));
}

Status PointSampleOp::Run(SampleContext& ctx) const {
  const PointsView* in = ctx.Get<PointsView>(slot_);
  if (in == nullptr) {
    return Status::MissingField("pointcloud.sample: no point cloud '" + spec_.field + "'");
  }
  if (in->channels != kPointChannels) {
    return Status::Internal("pointcloud.sample: " + std::to_string(in->channels) +
                            " channels per point where the plan has 4");
  }
  auto* out = reinterpret_cast<float*>(ctx.rows[row_]);
  const int64_t n = spec_.points;
  const size_t point_bytes = kPointChannels * sizeof(float);
  const int64_t taken = std::min(n, in->count);
  if (in->count <= n || spec_.select == PointSelection::kFirst) {
    if (taken > 0) std::memcpy(out, in->data, static_cast<size_t>(taken) * point_bytes);
  } else {
    // Selection sampling (Knuth's algorithm S): each point is kept with probability
    // (still needed) / (still left), which gives a uniform subset in the cloud's order
    // in one pass and no extra memory.
    Rng rng = ctx.OpRng(op_position_);
    int64_t needed = n;
    float* to = out;
    for (int64_t i = 0; i < in->count && needed > 0; ++i) {
      if (static_cast<int64_t>(rng.Below(static_cast<uint64_t>(in->count - i))) < needed) {
        std::memcpy(to, in->point(i), point_bytes);
        to += kPointChannels;
        --needed;
      }
    }
  }
  std::memset(out + taken * kPointChannels, 0, static_cast<size_t>(n - taken) * point_bytes);
  std::memcpy(ctx.rows[length_row_], &taken, sizeof taken);
  return Status::Ok();
}

}  // namespace headrace
