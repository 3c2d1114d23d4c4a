// The one list of operators. The config parser and emitter, the planner, the Python
// builders (through the schema the bindings export) and the conformance battery all
// iterate it; an operator that is not here does not exist for them.
//
// Adding an operator: its header and source (with the static description op_plan.h
// lists), its test, and one entry below (with its #include).
#pragma once

#include <cstddef>
#include <type_traits>
#include <variant>

#include "headrace/ops/audio/crop.h"
#include "headrace/ops/audio/decode.h"
#include "headrace/ops/audio/melspectrogram.h"
#include "headrace/ops/audio/resample.h"
#include "headrace/ops/image/center_crop.h"
#include "headrace/ops/image/color_jitter.h"
#include "headrace/ops/image/decode.h"
#include "headrace/ops/image/flip.h"
#include "headrace/ops/image/gaussian_blur.h"
#include "headrace/ops/image/grayscale.h"
#include "headrace/ops/image/normalize.h"
#include "headrace/ops/image/rand_augment.h"
#include "headrace/ops/image/random_resized_crop.h"
#include "headrace/ops/image/resize.h"
#include "headrace/ops/image/smart_resize.h"
#include "headrace/ops/ocr/text.h"
#include "headrace/ops/pointcloud/augment.h"
#include "headrace/ops/pointcloud/read.h"
#include "headrace/ops/pointcloud/sample.h"
#include "headrace/ops/pointcloud/voxelize.h"
#include "headrace/ops/text/tokenize.h"
#include "headrace/ops/video/decode.h"
#include "headrace/ops/video/patchify.h"
#include "headrace/ops/vision/patchify_op.h"
#include "headrace/ops/vision/rope_index.h"

namespace headrace {

namespace internal {
template <typename Spec, typename... Ops>
struct FindOp {
  using type = void;
};
template <typename Spec, typename Op, typename... Rest>
struct FindOp<Spec, Op, Rest...> {
  using type = std::conditional_t<std::is_same_v<typename Op::Spec, Spec>, Op,
                                  typename FindOp<Spec, Rest...>::type>;
};
}  // namespace internal

template <typename... Ops>
struct OpList {
  // The op whose Spec is `Spec`; void when none is.
  template <typename Spec>
  using OpFor = typename internal::FindOp<Spec, Ops...>::type;

  // The variant of the ops' specs, followed by `Extra...` (specs built in code).
  template <typename... Extra>
  using SpecVariant = std::variant<typename Ops::Spec..., Extra...>;

  // Calls f.template operator()<Op>() for each op, in order.
  template <typename F>
  static void ForEach(F&& f) {
    (f.template operator()<Ops>(), ...);
  }
};

using AllOps = OpList<DecodeOp,             //
                      ResizeOp,             //
                      SmartResizeOp,        //
                      PatchifyOp,           //
                      RopeIndexOp,          //
                      CenterCropOp,         //
                      RandomResizedCropOp,  //
                      FlipOp,               //
                      ColorJitterOp,        //
                      GrayscaleOp,          //
                      GaussianBlurOp,       //
                      RandAugmentOp,        //
                      NormalizeOp,          //
                      TokenizeOp,           //
                      VideoDecodeOp,        //
                      VideoPatchifyOp,      //
                      AudioDecodeOp,        //
                      AudioResampleOp,      //
                      AudioCropOp,          //
                      AudioMelSpectrogramOp,  //
                      OcrTextOp,            //
                      PointReadOp,          //
                      PointAugmentOp,       //
                      VoxelizeOp,           //
                      PointSampleOp>;

}  // namespace headrace
