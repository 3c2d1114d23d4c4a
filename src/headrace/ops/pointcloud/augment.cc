#include "headrace/ops/pointcloud/augment.h"

#include <cmath>
#include <cstring>

#include "headrace/ops/schema.h"

namespace headrace {

PointTransform DrawPointTransform(const PointAugmentSpec& spec, Rng& rng) {
  const bool flip_y = rng.Bernoulli(spec.flip_y);
  const bool flip_x = rng.Bernoulli(spec.flip_x);
  const double angle =
      rng.Uniform(spec.rotation_degrees[0], spec.rotation_degrees[1]) * (M_PI / 180.0);
  const double s = rng.Uniform(spec.scale[0], spec.scale[1]);
  const double fx = flip_x ? -1 : 1, fy = flip_y ? -1 : 1;
  const double c = std::cos(angle), n = std::sin(angle);
  // scale * Rz(angle) * diag(fx, fy, 1)
  return {static_cast<float>(s * c * fx), static_cast<float>(-s * n * fy), 0.0f,
          static_cast<float>(s * n * fx), static_cast<float>(s * c * fy),  0.0f,
          0.0f,                           0.0f,                            static_cast<float>(s)};
}

void TransformPoints(const PointTransform& m, const float* in, int64_t count, int channels,
                     float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float* p = in + i * channels;
    float* q = out + i * channels;
    const float x = p[0], y = p[1], z = p[2];
    q[0] = m[0] * x + m[1] * y;
    q[1] = m[3] * x + m[4] * y;
    q[2] = m[8] * z;
    for (int k = 3; k < channels; ++k) q[k] = p[k];
  }
}

Status PointAugmentOp::Validate(const Spec& s, const std::string& p) {
  const auto& r = s.rotation_degrees;
  if (!(r[0] <= r[1]) || !(r[0] >= -360) || !(r[1] <= 360)) {
    return schema::Invalid(p + ".rotation_degrees",
                           "must be [lo, hi] with -360 <= lo <= hi <= 360 (got [" +
                               schema::FormatDouble(r[0]) + ", " + schema::FormatDouble(r[1]) +
                               "])");
  }
  HR_RETURN_IF_ERROR(schema::Probability(p + ".flip_x", s.flip_x));
  HR_RETURN_IF_ERROR(schema::Probability(p + ".flip_y", s.flip_y));
  if (!(s.scale[0] > 0) || !(s.scale[0] <= s.scale[1]) || !(s.scale[1] <= 100)) {
    return schema::Invalid(p + ".scale", "must be [lo, hi] with 0 < lo <= hi <= 100 (got [" +
                                             schema::FormatDouble(s.scale[0]) + ", " +
                                             schema::FormatDouble(s.scale[1]) + "])");
  }
  return schema::NonEmpty(p + ".field", s.field, "the point cloud to augment");
}

Status PointAugmentOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc points, ctx.Read(spec.field, ValueKind::kPoints));
  if (!spec.transform.empty()) {
    ctx.AddField(FieldSpec{spec.transform, DType::kF32, {3, 3}}, ctx.key() + ".transform");
  }
  return ctx.Write(spec.field, std::move(points));
}

Result<std::unique_ptr<Op>> PointAugmentOp::Make(const Spec& spec, PlanContext& ctx) {
  return std::unique_ptr<Op>(std::make_unique<PointAugmentOp>(
      spec, ctx.position(), ctx.slot(spec.field),
      spec.transform.empty() ? -1 : ctx.row(spec.transform)));
}

Status PointAugmentOp::Run(SampleContext& ctx) const {
  const PointsView* in = ctx.Get<PointsView>(slot_);
  if (in == nullptr) {
    return Status::MissingField("pointcloud.augment: no point cloud '" + spec_.field + "'");
  }
  Rng rng = ctx.OpRng(op_position_);
  const PointTransform m = DrawPointTransform(spec_, rng);
  const size_t floats = static_cast<size_t>(in->count) * static_cast<size_t>(in->channels);
  // The next scratch slot is never the one holding the input (ops alternate).
  HR_ASSIGN_OR_RETURN(uint8_t * scratch,
                      ctx.NextScratchBytes(std::max<size_t>(floats, 1) * sizeof(float)));
  auto* out = reinterpret_cast<float*>(scratch);
  TransformPoints(m, in->data, in->count, in->channels, out);
  if (transform_row_ >= 0) std::memcpy(ctx.rows[transform_row_], m.data(), sizeof m);
  ctx.Set(slot_, PointsView{out, in->count, in->channels});
  return Status::Ok();
}

}  // namespace headrace
