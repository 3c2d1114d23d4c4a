// SourceSpec: where a dataset's manifest is and how to read its records.
#pragma once

#include <string>
#include <vector>

#include "headrace/core/sample.h"

namespace headrace {

// A JSONL manifest in the LLaVA / chat-VQA form:
//   {"id": "...", "image": "images/000123.jpg",
//    "conversations": [{"from": "human", "value": "<image>\n..."},
//                      {"from": "gpt", "value": "..."}]}
// Media paths are relative to `root` (by default the manifest's folder).
struct SourceSpec {
  std::string manifest;  // required: path of the JSONL file
  std::string root;      // dataset root for media paths; empty = the manifest's folder
  std::string id_field = "id";
  std::string image_field = "image";
  std::string conversations_field = "conversations";
  std::string role_field = "from";
  std::string text_field = "value";
  // Absolute media paths are rejected unless allowed (and must then still be inside root).
  bool allow_absolute_paths = false;
};

// The fields of the records a manifest source yields, in order: MediaRef::field and the
// planner's source values index this list. Today's manifest has two.
inline constexpr int kImageField = 0;         // media: the `image_field` key
inline constexpr int kConversationField = 1;  // SampleRecord::turns
inline std::vector<SourceField> SourceFieldsOf(const SourceSpec&) {
  return {SourceField{"image", FieldKind::kImage, 0},
          SourceField{"conversation", FieldKind::kConversation, 0}};
}

}  // namespace headrace
