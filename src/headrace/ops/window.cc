#include "headrace/ops/window.h"

#include <string_view>
#include <utility>

namespace headrace {
namespace {
constexpr std::pair<ClipStart, std::string_view> kClipStarts[] = {
    {ClipStart::kRandom, "random"}, {ClipStart::kStart, "start"}, {ClipStart::kCenter, "center"}};
}  // namespace

EnumTable<ClipStart> TableOf(ClipStart) { return kClipStarts; }

}  // namespace headrace
