// What a picture holds: a scene's size, backdrop, sky and objects, drawn from its key.
#include <algorithm>
#include <cmath>
#include <span>
#include <tuple>
#include <utility>

#include "headrace/core/rng.h"
#include "make_sample/make_sample_internal.h"

namespace headrace::make_sample_detail {
namespace {

// Aspect ratios as long:short; each also comes in portrait.
constexpr std::array<std::pair<int, int>, 4> kAspects = {{{1, 1}, {4, 3}, {3, 2}, {16, 9}}};
// The VLM mix's: wider, as documents, screenshots and panoramas are.
constexpr std::array<std::pair<int, int>, 6> kVlmAspects = {
    {{1, 1}, {4, 3}, {3, 2}, {16, 9}, {2, 1}, {3, 1}}};

float Uniform(Rng& rng, float lo, float hi) { return static_cast<float>(rng.Uniform(lo, hi)); }

// The nouns an object of `shape` may be called.
std::span<const std::string_view> Nouns(Shape shape) {
  static constexpr std::string_view kCircle[] = {"ball", "balloon", "plate", "clock", "coin"};
  static constexpr std::string_view kBox[] = {"box", "crate", "sign", "book", "tile"};
  static constexpr std::string_view kTriangle[] = {"tent", "sail", "flag", "roof", "cone"};
  static constexpr std::string_view kBus[] = {"bus"};
  switch (shape) {
    case Shape::kCircle: return kCircle;
    case Shape::kBox: return kBox;
    case Shape::kTriangle: return kTriangle;
    case Shape::kBus: return kBus;
  }
  return {};
}

// The backdrop and sky of `s` (sized already), and the exposure of the whole picture.
float MakeBackdrop(Rng& rng, Scene& s) {
  const float h = static_cast<float>(s.height);
  s.backdrop = static_cast<Backdrop>(rng.Below(5));
  s.sky = static_cast<Sky>(rng.Below(3));
  const float exposure = Uniform(rng, 0.85f, 1.1f);
  switch (s.sky) {
    case Sky::kClear: s.upper_top = {64, 116, 198}, s.upper_bottom = {172, 202, 232}; break;
    case Sky::kCloudy: s.upper_top = {146, 152, 164}, s.upper_bottom = {204, 204, 208}; break;
    case Sky::kSunset: s.upper_top = {58, 66, 138}, s.upper_bottom = {242, 162, 92}; break;
  }
  s.horizon = h * Uniform(rng, 0.35f, 0.6f);
  s.upper_texture = 2.5f;
  switch (s.backdrop) {
    case Backdrop::kField:
      s.lower_top = {96, 142, 64}, s.lower_bottom = {48, 98, 30}, s.lower_texture = 11;
      break;
    case Backdrop::kBeach:
      s.lower_top = {222, 204, 152}, s.lower_bottom = {196, 172, 118}, s.lower_texture = 6;
      break;
    case Backdrop::kStreet:
      s.lower_top = {124, 122, 126}, s.lower_bottom = {78, 78, 84}, s.lower_texture = 7;
      break;
    case Backdrop::kRoom: {
      s.wall = static_cast<int>(rng.Below(kWalls.size()));
      const Rgb wall = kWalls[s.wall].rgb;
      s.upper_top = wall;
      s.upper_bottom = {wall.r * 0.82f, wall.g * 0.82f, wall.b * 0.82f};
      s.lower_top = {152, 106, 66}, s.lower_bottom = {108, 72, 44};
      s.horizon = h * Uniform(rng, 0.55f, 0.75f);
      s.upper_texture = 3, s.lower_texture = 6;
      break;
    }
    case Backdrop::kStudio:
      s.upper_top = {226, 226, 226}, s.upper_bottom = {168, 168, 174};
      s.lower_top = s.lower_bottom = s.upper_bottom;
      s.horizon = h;
      s.upper_texture = s.lower_texture = 2;
      break;
  }
  for (Rgb* c : {&s.upper_top, &s.upper_bottom, &s.lower_top, &s.lower_bottom}) {
    *c = {c->r * exposure, c->g * exposure, c->b * exposure};
  }
  return exposure;
}

// Objects: distinct colours and nouns, so that every question names one object; the
// first is large, the rest small; an object that cannot be placed without overlapping
// is dropped, so the count stays true.
void AddObjects(Rng& rng, float exposure, Scene& s) {
  const float w = static_cast<float>(s.width), h = static_cast<float>(s.height);
  const int wanted = 1 + static_cast<int>(rng.Below(5));
  const float scale = std::min(w, h);
  std::vector<int> colours(kColours.size());
  for (size_t i = 0; i < colours.size(); ++i) colours[i] = static_cast<int>(i);
  std::vector<std::string_view> used_nouns;
  for (int k = 0; k < wanted; ++k) {
    Object o;
    // Partial Fisher-Yates: colours[k] is a fresh colour.
    std::swap(colours[k], colours[k + rng.Below(colours.size() - k)]);
    o.colour = colours[k];
    o.shape = static_cast<Shape>(rng.Below(4));
    auto nouns = Nouns(o.shape);
    o.noun = nouns[rng.Below(nouns.size())];
    if (std::find(used_nouns.begin(), used_nouns.end(), o.noun) != used_nouns.end()) continue;
    const float size = scale * (k == 0 ? Uniform(rng, 0.36f, 0.55f) : Uniform(rng, 0.1f, 0.24f));
    switch (o.shape) {
      case Shape::kCircle: o.hw = o.hh = size / 2; break;
      case Shape::kBox:
        o.hw = size / 2 * Uniform(rng, 0.6f, 1.0f);
        o.hh = rng.Bernoulli(0.3) ? o.hw : size / 2 * Uniform(rng, 0.6f, 1.0f);
        break;
      case Shape::kTriangle:
        o.hw = size / 2 * Uniform(rng, 0.7f, 1.0f);
        o.hh = size / 2 * Uniform(rng, 0.7f, 1.0f);
        break;
      case Shape::kBus:
        o.hw = std::min(size * 0.8f, w * 0.45f);
        o.hh = o.hw * 0.36f;
        o.windows = 3 + static_cast<int>(rng.Below(4));
        break;
    }
    const Rgb base = kColours[o.colour].rgb;
    const float jitter = 10;
    o.rgb = {std::clamp(base.r * exposure + Uniform(rng, -jitter, jitter), 0.f, 255.f),
             std::clamp(base.g * exposure + Uniform(rng, -jitter, jitter), 0.f, 255.f),
             std::clamp(base.b * exposure + Uniform(rng, -jitter, jitter), 0.f, 255.f)};
    const float ext_h = o.hh * (o.shape == Shape::kBus ? 1.3f : 1.0f);  // wheels
    bool placed = false;
    for (int attempt = 0; attempt < 16 && !placed; ++attempt) {
      o.cx = Uniform(rng, std::min(o.hw, w / 2), std::max(w - o.hw, w / 2));
      o.cy = Uniform(rng, std::min(ext_h, h / 2), std::max(h - ext_h, h / 2));
      placed = std::none_of(s.objects.begin(), s.objects.end(), [&](const Object& p) {
        return std::abs(p.cx - o.cx) < (p.hw + o.hw) * 1.05f &&
               std::abs(p.cy - o.cy) < (p.hh + o.hh) * 1.3f;
      });
    }
    if (!placed) continue;
    used_nouns.push_back(o.noun);
    s.objects.push_back(o);
  }
}

// A picture's size: the first draws of its scene's key.
std::pair<int, int> DrawSize(Rng& rng, SceneSizes sizes) {
  int long_side = 0, al = 1, as = 1;
  if (sizes == SceneSizes::kVqa) {
    long_side = 320 + static_cast<int>(rng.Below(1600 - 320 + 1));
    std::tie(al, as) = kAspects[rng.Below(kAspects.size())];
  } else {
    std::tie(al, as) = kVlmAspects[rng.Below(kVlmAspects.size())];
    const int lo = (kVlmMinSide * al + as - 1) / as;  // the short side stays >= kVlmMinSide
    long_side = lo + static_cast<int>(rng.Below(kVlmMaxSide - lo + 1));
  }
  const int short_side = std::max(1, static_cast<int>(std::lround(double(long_side) * as / al)));
  const bool portrait = al != as && rng.Bernoulli(0.5);
  return portrait ? std::pair{short_side, long_side} : std::pair{long_side, short_side};
}

}  // namespace

Scene MakeScene(uint64_t key, SceneSizes sizes, int fixed_width, int fixed_height) {
  Rng rng(key);
  Scene s;
  std::tie(s.width, s.height) = DrawSize(rng, sizes);
  if (fixed_width > 0 && fixed_height > 0) {  // the draws above still happen: same scenes
    s.width = fixed_width;
    s.height = fixed_height;
  }
  const float exposure = MakeBackdrop(rng, s);
  AddObjects(rng, exposure, s);
  return s;
}

}  // namespace headrace::make_sample_detail
