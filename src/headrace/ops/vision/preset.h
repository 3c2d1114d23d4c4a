// The vision geometry and normalisation of the Qwen-VL models, one line per model, as
// their Hugging Face repositories ship them: what `preset: qwen2_vl | qwen2_5_vl |
// qwen3_vl` means on image.smart_resize, vision.patchify and text.tokenize.
//
// Header-only data: image.smart_resize (ops/image) reads it, and hr_ops_vision links
// hr_ops_image (for the bf16/f16 conversions), so a preset.cc would make the two
// libraries need each other.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "headrace/ops/schema.h"

namespace headrace {

// Which model's preset a vision op follows.
enum class VisionModel {
  kNone,      // "none": no preset; every key takes its own default
  kQwen2Vl,   // "qwen2_vl": Qwen/Qwen2-VL-*-Instruct
  kQwen2_5Vl, // "qwen2_5_vl": Qwen/Qwen2.5-VL-*-Instruct
  kQwen3Vl,   // "qwen3_vl": Qwen/Qwen3-VL-*-Instruct
};

inline EnumTable<VisionModel> TableOf(VisionModel) {
  static constexpr std::pair<VisionModel, std::string_view> kNames[] = {
      {VisionModel::kNone, "none"},
      {VisionModel::kQwen2Vl, "qwen2_vl"},
      {VisionModel::kQwen2_5Vl, "qwen2_5_vl"},
      {VisionModel::kQwen3Vl, "qwen3_vl"},
  };
  return kNames;
}

// The special tokens that stand for vision input in the text, and their ids in the
// models' tokenizer.json (`added_tokens`; the same in all three families, and the
// `image_token_id`, `video_token_id`, `vision_start_token_id` of their config.json).
struct VisionTokens {
  std::string_view vision_start = "<|vision_start|>";  // 151652
  std::string_view vision_end = "<|vision_end|>";      // 151653
  std::string_view image_pad = "<|image_pad|>";        // 151655: one per merged patch
  std::string_view video_pad = "<|video_pad|>";        // 151656
  int32_t vision_start_id = 151652;
  int32_t vision_end_id = 151653;
  int32_t image_pad_id = 151655;
  int32_t video_pad_id = 151656;
};

// The chat template of Qwen/Qwen2-VL-7B-Instruct (its chat_template.json), byte for byte;
// Qwen/Qwen2.5-VL-7B-Instruct ships the same text. text.tokenize renders with it when
// neither its chat_template key nor a tokenizer_config.json gives one.
// tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja holds the same text, and
// tests/python/test_preset_chat_template.py checks the two agree.
inline constexpr std::string_view kQwen2VlChatTemplate = R"jinja({% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] }}<|im_end|>
{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %})jinja";

// The chat template of Qwen/Qwen3-VL-8B-Instruct, byte for byte (5292 bytes, SHA-256
// 3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4: the text Qwen ships in
// Qwen/Qwen3-VL-8B-Instruct-GGUF's tokenizer.chat_template). Unlike Qwen2-VL's it writes no
// default system turn, and it renders tools and tool turns.
// tests/python/data/chat_templates/Qwen3-VL-8B-Instruct.jinja holds the same text, and
// tests/python/test_preset_chat_template.py checks the two agree and the digest.
inline constexpr std::string_view kQwen3VlChatTemplate = R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)jinja";

struct VisionPreset {
  VisionModel model = VisionModel::kNone;
  int patch_size = 0;           // spatial patch side, pixels
  int temporal_patch_size = 0;  // frames per patch (a still image is repeated to it)
  int merge_size = 0;           // merge_size x merge_size patches become one LLM token
  std::array<float, 3> image_mean{};
  std::array<float, 3> image_std{};
  // smart_resize's pixel range for images (h * w after resizing).
  int64_t image_min_pixels = 0;
  int64_t image_max_pixels = 0;
  // The video processor's range: for qwen3_vl its smart_resize bounds frames * h * w.
  int64_t video_min_pixels = 0;
  int64_t video_max_pixels = 0;
  VisionTokens tokens;
  // The model's chat template (Jinja), text.tokenize's when the config and the
  // tokenizer_config.json give none; empty: the preset has none to give.
  std::string_view chat_template{};

  int factor() const { return patch_size * merge_size; }  // sides are multiples of it
};

// Sources (the repositories' files as of 2025; cross-checked with the installed
// transformers' Qwen2VLImageProcessorPil / Qwen3VLVideoProcessor, whose own class
// defaults differ: max_pixels 28*28*1280 there, 12845056 in the Hub configs):
//   qwen2_vl   — Qwen/Qwen2-VL-7B-Instruct/preprocessor_config.json: min_pixels 3136,
//                max_pixels 12845056, patch_size 14, temporal_patch_size 2, merge_size 2,
//                image_mean/std OPENAI_CLIP. No video_preprocessor_config.json: transformers'
//                video processor falls back to preprocessor_config.json (the same range).
//   qwen2_5_vl — Qwen/Qwen2.5-VL-7B-Instruct/preprocessor_config.json: the same values.
//   qwen3_vl   — Qwen/Qwen3-VL-8B-Instruct/preprocessor_config.json: size {shortest_edge
//                65536, longest_edge 16777216}, patch_size 16, temporal_patch_size 2,
//                merge_size 2, image_mean/std 0.5; video_preprocessor_config.json: size
//                {shortest_edge 4096, longest_edge 25165824}.
// Chat templates: qwen2_vl and qwen2_5_vl kQwen2VlChatTemplate, qwen3_vl
// kQwen3VlChatTemplate.
inline constexpr std::array<float, 3> kOpenAiClipMean = {0.48145466f, 0.4578275f, 0.40821073f};
inline constexpr std::array<float, 3> kOpenAiClipStd = {0.26862954f, 0.26130258f, 0.27577711f};

inline constexpr VisionPreset kVisionPresets[] = {
    {.model = VisionModel::kQwen2Vl, .patch_size = 14, .temporal_patch_size = 2,
     .merge_size = 2, .image_mean = kOpenAiClipMean, .image_std = kOpenAiClipStd,
     .image_min_pixels = 3136, .image_max_pixels = 12845056, .video_min_pixels = 3136,
     .video_max_pixels = 12845056, .tokens = {}, .chat_template = kQwen2VlChatTemplate},
    {.model = VisionModel::kQwen2_5Vl, .patch_size = 14, .temporal_patch_size = 2,
     .merge_size = 2, .image_mean = kOpenAiClipMean, .image_std = kOpenAiClipStd,
     .image_min_pixels = 3136, .image_max_pixels = 12845056, .video_min_pixels = 3136,
     .video_max_pixels = 12845056, .tokens = {}, .chat_template = kQwen2VlChatTemplate},
    {.model = VisionModel::kQwen3Vl, .patch_size = 16, .temporal_patch_size = 2,
     .merge_size = 2, .image_mean = {0.5f, 0.5f, 0.5f}, .image_std = {0.5f, 0.5f, 0.5f},
     .image_min_pixels = 65536, .image_max_pixels = 16777216, .video_min_pixels = 4096,
     .video_max_pixels = 25165824, .tokens = {}, .chat_template = kQwen3VlChatTemplate},
};

// The preset's name when it gave both the patch and the merge size (neither key was
// set), else "": what PatchGeometry::preset says in messages.
inline std::string_view PresetOfSizes(VisionModel preset, int patch_size, int merge_size) {
  return preset != VisionModel::kNone && patch_size == 0 && merge_size == 0 ? EnumName(preset)
                                                                            : "";
}

// The preset of `model`; null for kNone (and for a value outside the enum).
inline const VisionPreset* FindVisionPreset(VisionModel model) {
  for (const VisionPreset& p : kVisionPresets) {
    if (p.model == model) return &p;
  }
  return nullptr;
}

}  // namespace headrace
