#include "headrace/core/sample.h"

#include <algorithm>

#include "headrace/core/strings.h"

namespace headrace {

const std::string& SampleRecord::uri() const {
  static const std::string kNone;
  if (!location.empty()) return location;
  return media.empty() ? kNone : media.front().uri;
}

const Buffer* Sample::MediaOf(int field) const {
  for (const FieldMedia& m : parsed_media) {
    if (m.field == field) return &m.bytes;
  }
  if (record == nullptr) return nullptr;
  const size_t n = std::min(media.size(), record->media.size());
  for (size_t i = 0; i < n; ++i) {
    if (record->media[i].field == field) return &media[i];
  }
  return nullptr;
}

std::string SampleError::ToString() const {
  // A URI from a hostile manifest may be huge; the status usually quotes it again.
  const std::string where = uri.empty()       ? std::string("<no uri>")
                            : uri.size() > 200 ? QuoteForMessage(uri)
                                               : uri;
  return "epoch " + std::to_string(epoch) + ", index " + std::to_string(index) + ", " + where +
         ": " + status.ToString();
}

}  // namespace headrace
