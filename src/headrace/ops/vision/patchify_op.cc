#include "headrace/ops/vision/patchify_op.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "headrace/ops/schema.h"

namespace headrace {

PatchifyParams ResolvePatchify(const PatchifySpec& spec) {
  PatchifyParams params;  // the class defaults: 14, 2, 2, OpenAI CLIP
  if (const VisionPreset* p = FindVisionPreset(spec.preset)) {
    params.patch_size = p->patch_size;
    params.temporal_patch_size = p->temporal_patch_size;
    params.merge_size = p->merge_size;
    params.mean = p->image_mean;
    params.std = p->image_std;
  }
  if (spec.patch_size != 0) params.patch_size = spec.patch_size;
  if (spec.temporal_patch_size != 0) params.temporal_patch_size = spec.temporal_patch_size;
  if (spec.merge_size != 0) params.merge_size = spec.merge_size;
  if (spec.mean) params.mean = *spec.mean;
  if (spec.std) params.std = *spec.std;
  params.dtype = spec.dtype;
  return params;
}

Status PatchifyOp::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".field", s.field, "the image value to patchify"));
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".output", s.output, "the pixel_values field"));
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".grid_output", s.grid_output, "the grid field"));
  if (s.output == s.grid_output) {
    return schema::Invalid(p + ".grid_output", "must differ from output (both '" + s.output + "')");
  }
  HR_RETURN_IF_ERROR(schema::KnownEnum(p + ".preset", s.preset));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".patch_size", s.patch_size, 0, 1024));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".temporal_patch_size", s.temporal_patch_size, 0, 64));
  HR_RETURN_IF_ERROR(schema::InRange(p + ".merge_size", s.merge_size, 0, 64));
  for (size_t c = 0; c < 3; ++c) {
    if (s.mean && !std::isfinite((*s.mean)[c])) {
      return schema::Invalid(p + ".mean[" + std::to_string(c) + "]",
                             "must be finite" + schema::Got((*s.mean)[c]));
    }
    if (s.std && (!std::isfinite((*s.std)[c]) || (*s.std)[c] == 0)) {
      return schema::Invalid(p + ".std[" + std::to_string(c) + "]",
                             "must be finite and non-zero" + schema::Got((*s.std)[c]));
    }
  }
  if (EnumName(s.dtype).empty()) {
    return schema::Invalid(p + ".dtype", "unsupported dtype " + schema::Quote(DTypeName(s.dtype)) +
                                             " (allowed: " + AllowedNames(TableOf(s.dtype)) + ")");
  }
  return Status::Ok();
}

Status PatchifyOp::Declare(const Spec& spec, PlanContext& ctx) {
  HR_ASSIGN_OR_RETURN(ValueDesc image, ctx.Read(spec.field, ValueKind::kImage));
  const PatchifyParams params = ResolvePatchify(spec);
  const PatchGeometry mine{
      params.patch_size, params.merge_size, ctx.key(),
      std::string(PresetOfSizes(spec.preset, spec.patch_size, spec.merge_size))};
  const int factor = params.patch_size * params.merge_size;
  HR_RETURN_IF_ERROR(CheckSameGeometry(
      mine, image.geometry,
      "the image's sides are multiples of " +
          std::to_string(image.geometry.patch_size * image.geometry.merge_size) +
          ", and patchify needs multiples of " + std::to_string(factor)));
  if (image.shape.size() == 3 && image.shape[0] > 0 && image.shape[1] > 0 &&
      (image.shape[0] % factor != 0 || image.shape[1] % factor != 0)) {
    return ctx.Error("the image is " + std::to_string(image.shape[1]) + "x" +
                     std::to_string(image.shape[0]) + " here (" + image.shape_source +
                     "), not a multiple of patch_size * merge_size = " + std::to_string(factor) +
                     " on both sides: add image.smart_resize before it");
  }
  const int64_t patch_dim =
      int64_t{3} * params.temporal_patch_size * params.patch_size * params.patch_size;
  ctx.AddField(FieldSpec{spec.output, spec.dtype, {patch_dim}, FieldLayout::kRagged},
               ctx.key() + ".patch_size " + std::to_string(params.patch_size) +
                   " (each image's patches: their number varies with its size)");
  ctx.AddField(FieldSpec{spec.grid_output, DType::kI64, {3}},
               ctx.key() + " (t, h, w patches per image)");
  ctx.SetGeometry(mine);
  return Status::Ok();
}

Result<std::unique_ptr<Op>> PatchifyOp::Make(const Spec& spec, PlanContext& ctx) {
  Result<PatchifyKernel> kernel = PatchifyKernel::Make(ResolvePatchify(spec));
  if (!kernel.ok()) return ctx.Error(kernel.status().message());
  return std::unique_ptr<Op>(std::make_unique<PatchifyOp>(
      *std::move(kernel), ctx.slot(spec.field), ctx.row(spec.output), ctx.row(spec.grid_output)));
}

PatchifyOp::PatchifyOp(PatchifyKernel kernel, int slot, int pixels_row, int grid_row)
    : kernel_(std::move(kernel)), slot_(slot), pixels_row_(pixels_row), grid_row_(grid_row) {}

Status PatchifyOp::Run(SampleContext& ctx) const {
  const ImageView* image = ctx.Get<ImageView>(slot_);
  if (image == nullptr) return Status::Internal("vision.patchify: no image (decode first)");
  // The size pass, then the rows straight into the sample's ragged rows.
  HR_ASSIGN_OR_RETURN(PatchGrid grid, kernel_.Grid(image->width, image->height, 1));
  HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(pixels_row_, grid.patches()));
  HR_RETURN_IF_ERROR(
      kernel_.Into(std::span<const ImageView>(image, 1), {out, kernel_.Bytes(grid)}).status());
  const int64_t thw[3] = {grid.t, grid.h, grid.w};
  std::memcpy(ctx.rows[grid_row_], thw, sizeof thw);
  return Status::Ok();
}

bool PatchifyOp::Predict(SizePass& pass) const {
  const SizePass::Size image = pass.images[static_cast<size_t>(slot_)];
  if (image.width <= 0) return false;
  const Result<PatchGrid> grid = kernel_.Grid(image.width, image.height, 1);
  if (!grid.ok()) return false;
  pass.rows[static_cast<size_t>(pixels_row_)] += grid->patches();
  if (!pass.grids.empty()) {
    pass.grids[static_cast<size_t>(grid_row_)].insert(
        pass.grids[static_cast<size_t>(grid_row_)].end(), {grid->t, grid->h, grid->w});
  }
  return true;
}

}  // namespace headrace
