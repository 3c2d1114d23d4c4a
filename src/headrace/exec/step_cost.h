// StepCost: what a sample costs the trainer's step, from its sizes alone (batch.balance:
// docs/balanced_steps.md). A data-parallel step waits for its slowest rank, so a rank's
// step costs the sum of its samples' costs, and balancing deals each step's samples so
// that the sums come out even (exec/step_deal.h).
//
//   tokens      the sample's tokens (text and vision: the model's sequence)
//   flops       the model's forward + backward FLOPs (3 x forward), from its dimensions:
//     LLM      2 x params x tokens  +  per layer 2 x tokens^2 x hidden   (causal attention
//              over the sample's own tokens: a packed row's samples attend within
//              themselves, so a sample's cost does not depend on its row)
//     vision   per image or video: 2 x params x patches  +  per layer 4 x p^2 x hidden,
//              p = its patches (bidirectional), or p x window for a windowed layer
//              (Qwen2.5-VL: full attention in 4 of 32 layers, windows of 64 patches else)
// The presets are each family's 7B/8B model, their parameter counts worked out from the
// configs' dimensions (the layers and the output head, not the input embedding: a
// lookup; see step_cost.cc); any dimension can be given instead.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"

namespace headrace {

// What a sample's cost depends on, known before it runs (its size pass: exec/pack_sizer.h).
struct SampleSize {
  int64_t tokens = 0;            // the model's sequence: text and vision tokens
  std::vector<int64_t> patches;  // per image or video: the vision tower's patches (t*h*w)
  uint32_t modalities = 0;       // ModalityBit of each kind of media the sample holds
};

// The bit of a media kind in SampleSize::modalities.
constexpr uint32_t ModalityBit(FieldKind kind) { return uint32_t{1} << static_cast<int>(kind); }
// The kinds of media batch.balance.every_rank may list, in the order the `dummy_kinds`
// batch field gives them.
inline constexpr FieldKind kBalanceKinds[] = {FieldKind::kImage, FieldKind::kVideo,
                                              FieldKind::kAudio, FieldKind::kPointCloud};

// A model's dimensions, as the cost counts them.
struct ModelDims {
  double llm_params = 0;  // the language model's parameters a token is multiplied by:
                          // its layers' and the output head's (not the input embedding)
  int64_t llm_layers = 0;
  int64_t llm_hidden = 0;  // attention width (heads x head dim)
  double vision_params = 0;
  int64_t vision_layers = 0;
  int64_t vision_hidden = 0;
  // Windowed vision layers: patches per window (0: every layer attends the whole image)
  // and how many layers attend the whole image still.
  int64_t vision_window = 0;
  int64_t vision_full_layers = 0;
};

enum class CostKind { kTokens, kFlops };

struct StepCostOptions {
  CostKind kind = CostKind::kTokens;
  ModelDims model;  // kFlops: the dimensions
};

// The options of a cost named as batch.balance.cost names it: "tokens", "flops" (the
// dimensions `given`), or a preset (below) whose dimensions those of `given` above 0
// replace. kInvalidArgument for another name, listing the allowed ones.
Result<StepCostOptions> StepCostOptionsFor(std::string_view cost, const ModelDims& given);

// A preset's dimensions: "qwen2_vl" (Qwen2-VL-7B), "qwen2_5_vl" (Qwen2.5-VL-7B), "qwen3_vl"
// (Qwen3-VL-8B); nullopt for another name.
std::optional<ModelDims> ModelPreset(std::string_view name);
// The preset names, for a configuration error.
std::span<const std::string_view> ModelPresetNames();

class StepCost {
 public:
  // kInvalidArgument for kFlops with a dimension <= 0 (naming it), or a window without
  // full layers fewer than the vision layers.
  static Result<StepCost> Make(const StepCostOptions& options);
  // The sample's cost: tokens, or FLOPs (forward + backward).
  double Of(const SampleSize& size) const;
  const StepCostOptions& options() const { return options_; }

 private:
  explicit StepCost(const StepCostOptions& options) : options_(options) {}
  StepCostOptions options_;
};

}  // namespace headrace
