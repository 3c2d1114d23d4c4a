#include "headrace/core/sample.h"

#include "headrace/core/strings.h"

namespace headrace {

const std::string& SampleRecord::uri() const {
  static const std::string kNone;
  if (!location.empty()) return location;
  return media.empty() ? kNone : media.front().uri;
}

const Buffer* Sample::MediaOf(int field) const {
  const Item* item = ItemOf(field);
  return item != nullptr ? &item->bytes : nullptr;
}

const Sample::Item* Sample::ItemOf(int field) const {
  for (const Item& item : media) {
    if (item.field == field) return &item;
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
