#include "headrace/core/sample.h"

#include "headrace/core/strings.h"

namespace headrace {

std::string SampleError::ToString() const {
  // A URI from a hostile manifest may be huge; the status usually quotes it again.
  const std::string where = uri.empty()       ? std::string("<no uri>")
                            : uri.size() > 200 ? QuoteForMessage(uri)
                                               : uri;
  return "epoch " + std::to_string(epoch) + ", index " + std::to_string(index) + ", " + where +
         ": " + status.ToString();
}

}  // namespace headrace
