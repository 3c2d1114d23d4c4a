#include "headrace/ops/value.h"

#include <algorithm>

namespace headrace {

std::string_view ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kEncoded: return "encoded bytes";
    case ValueKind::kImage: return "an image";
    case ValueKind::kConversation: return "a conversation";
    case ValueKind::kAudio: return "audio";
    case ValueKind::kPoints: return "a point cloud";
  }
  return "an unknown kind";
}

void FillSourceValues(std::span<const SourceValue> sources, const Sample& sample,
                      std::span<Value> values) {
  std::fill(values.begin(), values.end(), Value());
  for (const SourceValue& source : sources) {
    Value& value = values[static_cast<size_t>(source.slot)];
    switch (source.from) {
      case SourceValue::From::kMedia:
        if (const Sample::Item* item = sample.ItemOf(source.field)) {
          value = EncodedBytes{item->bytes.data(), item->bytes.size(), item->reader.get()};
        }
        break;
      case SourceValue::From::kConversation:
        value = TurnsView{sample.turns};
        break;
    }
  }
}

}  // namespace headrace
