// The typed specs of the operators: what each accepts, with its documented defaults.
//
// They live with the operators (not in pipeline/) so that an operator depends only on
// layers below it; the pipeline layer collects them into OpSpec.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "headrace/core/tensor.h"

namespace headrace {

// --- operators ----------------------------------------------------------------------

struct DecodeSpec {  // image.decode
  // Images whose header declares more pixels are rejected before decoding
  // (decompression bombs). Default: PIL's MAX_IMAGE_PIXELS.
  int64_t max_pixels = 89'478'485;
};

struct ResizeSpec {  // image.resize
  // Exactly one of: shorter_side > 0 (keep aspect), or width and height > 0 (exact).
  int shorter_side = 0;
  int width = 0;
  int height = 0;
  bool antialias = true;  // area-average when downscaling
};

struct CenterCropSpec {  // image.center_crop
  int width = 0;
  int height = 0;
};

struct RandomResizedCropSpec {  // image.random_resized_crop (torchvision semantics)
  int width = 0;
  int height = 0;
  std::array<double, 2> scale = {0.08, 1.0};
  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0};
};

struct FlipSpec {  // image.flip (random horizontal)
  double p = 0.5;
};

// Which axis order normalize writes.
enum class Layout {
  kCHW,  // channels first: what PyTorch vision models take
  kHWC,  // channels last
};

struct NormalizeSpec {  // image.normalize: (pixel / 255 - mean) / std
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  DType dtype = DType::kF32;  // f32, f16 or bf16
  Layout layout = Layout::kCHW;
};

// Renders a conversation with a simple chat template and tokenizes it with
// SentencePiece: each turn is `<prefix><text><turn_end>`; the loss mask covers only
// the assistant turns' text and turn_end.
struct TokenizeSpec {  // text.tokenize
  std::string model;   // required: SentencePiece .model file
  int max_length = 128;
  bool pad = true;          // pad every row to max_length (false is not supported by collation yet)
  int pad_id = -1;          // -1: the model's pad id, or 0 if it has none
  int ignore_index = -100;  // label value outside the loss mask
  bool add_bos = true;
  bool add_eos = true;
  std::string system_prefix = "<|system|>\n";
  std::string user_prefix = "<|user|>\n";
  std::string assistant_prefix = "<|assistant|>\n";
  std::string turn_end = "\n";
};

}  // namespace headrace
