// SourceSpec: where a dataset's manifest is and how to read its records.
#pragma once

#include <string>

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

}  // namespace headrace
