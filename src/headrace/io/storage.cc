#include "headrace/io/storage.h"

#include <algorithm>
#include <future>

namespace headrace {

Result<Buffer> Storage::Read(const std::string& uri) {
  std::promise<Result<Buffer>> promise;
  auto future = promise.get_future();
  ReadAsync(uri, [&promise](Result<Buffer> result) { promise.set_value(std::move(result)); });
  return future.get();
}

Result<int64_t> Storage::Size(const std::string& uri) {
  std::promise<Result<int64_t>> promise;
  auto future = promise.get_future();
  SizeAsync(
      uri, [&promise](Result<int64_t> result) { promise.set_value(std::move(result)); }, nullptr);
  return future.get();
}

void Storage::ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length,
                                  ReadCallback done, ReadGate gate) {
  ReadAsyncGated(
      std::move(uri),
      [offset, length, done = std::move(done)](Result<Buffer> bytes) {
        if (!bytes.ok()) return done(std::move(bytes));
        const auto size = static_cast<int64_t>(bytes->size());
        if (offset < 0 || offset > size) {
          return done(Status::InvalidArgument("byte range starts at " + std::to_string(offset) +
                                              ", past the object's " + std::to_string(size) +
                                              " bytes"));
        }
        const int64_t n = length < 0 ? size - offset : std::min(length, size - offset);
        done(bytes->Slice(static_cast<size_t>(offset), static_cast<size_t>(n)));
      },
      std::move(gate));
}

void Storage::SizeAsync(std::string uri, SizeCallback done, ReadGate wanted) {
  ReadAsyncGated(
      std::move(uri),
      [done = std::move(done)](Result<Buffer> bytes) {
        if (!bytes.ok()) return done(bytes.status());
        done(static_cast<int64_t>(bytes->size()));
      },
      wanted ? ReadGate([wanted](int64_t bytes) {
        return bytes != kReadStillWanted || wanted(kReadStillWanted);
      })
             : ReadGate());
}

}  // namespace headrace
