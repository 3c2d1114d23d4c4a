#include "headrace/core/sample.h"

namespace headrace {

std::string SampleError::ToString() const {
  return "epoch " + std::to_string(epoch) + ", index " + std::to_string(index) + ", " +
         (uri.empty() ? std::string("<no uri>") : uri) + ": " + status.ToString();
}

}  // namespace headrace
