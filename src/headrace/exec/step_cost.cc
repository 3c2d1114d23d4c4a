#include "headrace/exec/step_cost.h"

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <type_traits>

namespace headrace {
namespace {

// A decoder layer's weights: attention (q and o at hidden x hidden, k and v at hidden x
// kv_width) and a gated MLP (3 x hidden x intermediate).
double DecoderLayerParams(double hidden, double kv_width, double intermediate) {
  return hidden * (2 * hidden + 2 * kv_width) + 3 * hidden * intermediate;
}
// A vision block's: attention (4 x hidden^2) and an MLP of `matrices` hidden x intermediate.
double VisionBlockParams(double hidden, double intermediate, int matrices) {
  return 4 * hidden * hidden + matrices * hidden * intermediate;
}

struct Preset {
  std::string_view name;
  ModelDims dims;
};

// The output head's vocabulary: every token passes through it (hidden x vocab), where the
// input embedding is a lookup. Qwen2-VL, Qwen2.5-VL and Qwen3-VL share it.
constexpr double kVocab = 151936;

// From each model's config.json (text_config / vision_config):
//   Qwen2-VL-7B    LLM hidden 3584, 28 layers, kv 4 x 128, intermediate 18944;
//                  ViT embed 1280, depth 32, MLP 2 x 1280 x 5120
//   Qwen2.5-VL-7B  the same LLM; ViT hidden 1280, depth 32, gated MLP 3 x 1280 x 3420,
//                  windows of 112 px (8 x 8 patches of 14), full attention in blocks
//                  7, 15, 23, 31
//   Qwen3-VL-8B    LLM hidden 4096, 36 layers, kv 8 x 128, intermediate 12288;
//                  ViT hidden 1152, depth 27, MLP 2 x 1152 x 4304
const std::array<Preset, 3>& Presets() {
  static const std::array<Preset, 3> presets = {{
      {"qwen2_vl",
       {.llm_params = 28 * DecoderLayerParams(3584, 512, 18944) + kVocab * 3584,
        .llm_layers = 28,
        .llm_hidden = 3584,
        .vision_params = 32 * VisionBlockParams(1280, 5120, 2),
        .vision_layers = 32,
        .vision_hidden = 1280}},
      {"qwen2_5_vl",
       {.llm_params = 28 * DecoderLayerParams(3584, 512, 18944) + kVocab * 3584,
        .llm_layers = 28,
        .llm_hidden = 3584,
        .vision_params = 32 * VisionBlockParams(1280, 3420, 3),
        .vision_layers = 32,
        .vision_hidden = 1280,
        .vision_window = 64,
        .vision_full_layers = 4}},
      {"qwen3_vl",
       {.llm_params = 36 * DecoderLayerParams(4096, 1024, 12288) + kVocab * 4096,
        .llm_layers = 36,
        .llm_hidden = 4096,
        .vision_params = 27 * VisionBlockParams(1152, 4304, 2),
        .vision_layers = 27,
        .vision_hidden = 1152}},
  }};
  return presets;
}

}  // namespace

std::optional<ModelDims> ModelPreset(std::string_view name) {
  for (const Preset& p : Presets()) {
    if (p.name == name) return p.dims;
  }
  return std::nullopt;
}

std::span<const std::string_view> ModelPresetNames() {
  static const auto names = [] {
    std::array<std::string_view, std::tuple_size_v<std::decay_t<decltype(Presets())>>> out;
    for (size_t i = 0; i < out.size(); ++i) out[i] = Presets()[i].name;
    return out;
  }();
  return names;
}

Result<StepCostOptions> StepCostOptionsFor(std::string_view cost, const ModelDims& given) {
  StepCostOptions options;
  if (cost == "tokens") return options;
  options.kind = CostKind::kFlops;
  if (cost == "flops") {
    options.model = given;
    return options;
  }
  std::optional<ModelDims> preset = ModelPreset(cost);
  if (!preset.has_value()) {
    std::string allowed = "tokens, flops";
    for (std::string_view name : ModelPresetNames()) allowed += ", " + std::string(name);
    return Status::InvalidArgument("'" + std::string(cost) + "' is not a cost; allowed: " +
                                   allowed);
  }
  ModelDims& m = *preset;
  auto take = [](auto& into, auto value) {
    if (value > 0) into = value;
  };
  take(m.llm_params, given.llm_params);
  take(m.llm_layers, given.llm_layers);
  take(m.llm_hidden, given.llm_hidden);
  take(m.vision_params, given.vision_params);
  take(m.vision_layers, given.vision_layers);
  take(m.vision_hidden, given.vision_hidden);
  take(m.vision_window, given.vision_window);
  take(m.vision_full_layers, given.vision_full_layers);
  options.model = m;
  return options;
}

Result<StepCost> StepCost::Make(const StepCostOptions& options) {
  if (options.kind == CostKind::kFlops) {
    const ModelDims& m = options.model;
    const std::pair<const char*, double> positive[] = {
        {"llm_params", m.llm_params},       {"llm_layers", double(m.llm_layers)},
        {"llm_hidden", double(m.llm_hidden)}, {"vision_params", m.vision_params},
        {"vision_layers", double(m.vision_layers)}, {"vision_hidden", double(m.vision_hidden)}};
    for (const auto& [key, value] : positive) {
      if (!(value > 0)) {
        return Status::InvalidArgument(std::string(key) + " must be > 0 for a FLOPs cost");
      }
    }
    if (m.vision_window < 0 || m.vision_full_layers < 0 ||
        m.vision_full_layers > m.vision_layers) {
      return Status::InvalidArgument(
          "vision_window must be >= 0 and vision_full_layers within [0, vision_layers]");
    }
  }
  return StepCost(options);
}

double StepCost::Of(const SampleSize& size) const {
  const double tokens = static_cast<double>(std::max<int64_t>(size.tokens, 0));
  if (options_.kind == CostKind::kTokens) return tokens;
  const ModelDims& m = options_.model;
  double forward = 2 * m.llm_params * tokens +
                   double(m.llm_layers) * 2 * tokens * tokens * double(m.llm_hidden);
  const int64_t windowed = m.vision_window > 0 ? m.vision_layers - m.vision_full_layers : 0;
  const int64_t full = m.vision_layers - windowed;
  for (int64_t patches : size.patches) {
    const double p = static_cast<double>(std::max<int64_t>(patches, 0));
    const double window = std::min(p, double(m.vision_window));
    forward += 2 * m.vision_params * p +
               4 * double(m.vision_hidden) * p * (double(full) * p + double(windowed) * window);
  }
  return 3 * forward;  // forward + backward (the backward pass: twice the forward's FLOPs)
}

}  // namespace headrace
