// The names of FieldKind, as configs spell them (source.fields[].kind) and as messages
// print them: one table for the config schema and for every message that names a kind.
#pragma once

#include <string_view>
#include <utility>

#include "headrace/core/sample.h"

namespace headrace {

inline constexpr std::pair<FieldKind, std::string_view> kFieldKindNames[] = {
    {FieldKind::kImage, "image"},   {FieldKind::kVideo, "video"},
    {FieldKind::kAudio, "audio"},   {FieldKind::kPointCloud, "pointcloud"},
    {FieldKind::kBytes, "bytes"},   {FieldKind::kText, "text"},
    {FieldKind::kConversation, "conversation"},
    {FieldKind::kInt, "int"},       {FieldKind::kFloat, "float"},
    {FieldKind::kString, "string"}};

constexpr std::string_view FieldKindName(FieldKind kind) {
  for (const auto& [k, name] : kFieldKindNames) {
    if (k == kind) return name;
  }
  return "?";
}

}  // namespace headrace
