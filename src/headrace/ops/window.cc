#include "headrace/ops/window.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace headrace {
namespace {
constexpr std::pair<ClipStart, std::string_view> kClipStarts[] = {
    {ClipStart::kRandom, "random"}, {ClipStart::kStart, "start"}, {ClipStart::kCenter, "center"}};
}  // namespace

EnumTable<ClipStart> TableOf(ClipStart) { return kClipStarts; }

int64_t WindowBegin(ClipStart start, int64_t total, int64_t length, Rng rng) {
  const int64_t slack = total - length;
  if (slack <= 0) return 0;
  switch (start) {
    case ClipStart::kRandom:
      return std::min(static_cast<int64_t>(rng.Uniform() * static_cast<double>(slack + 1)),
                      slack);
    case ClipStart::kStart: return 0;
    case ClipStart::kCenter: return slack / 2;
  }
  return 0;
}

}  // namespace headrace
