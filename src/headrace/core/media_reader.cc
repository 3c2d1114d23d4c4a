#include "headrace/core/media_reader.h"

#include <algorithm>
#include <cstring>

namespace headrace {

Result<Buffer> MediaReader::ReadExact(int64_t offset, int64_t length) {
  length = std::max<int64_t>(0, std::min(length, size() - offset));
  HR_ASSIGN_OR_RETURN(Buffer first, Read(offset, length));
  if (static_cast<int64_t>(first.size()) >= length) return first;
  HR_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(static_cast<size_t>(length)));
  std::memcpy(out.mutable_data(), first.data(), first.size());
  int64_t have = static_cast<int64_t>(first.size());
  while (have < length) {
    HR_ASSIGN_OR_RETURN(Buffer more, Read(offset + have, length - have));
    if (more.size() == 0) break;  // the object ended early (it changed under us)
    std::memcpy(out.mutable_data() + have, more.data(), more.size());
    have += static_cast<int64_t>(more.size());
  }
  return out.Slice(0, static_cast<size_t>(have));
}

}  // namespace headrace
