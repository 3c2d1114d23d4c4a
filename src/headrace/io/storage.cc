#include "headrace/io/storage.h"

#include <future>

namespace headrace {

Result<Buffer> Storage::Read(const std::string& uri) {
  std::promise<Result<Buffer>> promise;
  auto future = promise.get_future();
  ReadAsync(uri, [&promise](Result<Buffer> result) { promise.set_value(std::move(result)); });
  return future.get();
}

}  // namespace headrace
