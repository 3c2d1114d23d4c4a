#include "make_sample/make_sample.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "headrace/core/clock.h"
#include "headrace/core/rng.h"
#include "headrace/ops/av/av_encode.h"
#include "make_sample/make_sample_ocr.h"
#include "make_sample/make_sample_speech.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

// --- what a picture holds -------------------------------------------------------------

struct Rgb {
  float r = 0, g = 0, b = 0;
};

Rgb Lerp(Rgb a, Rgb b, float t) {
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

struct NamedColour {
  std::string_view name;
  Rgb rgb;
};

constexpr std::array<NamedColour, 11> kColours = {{
    {"red", {200, 38, 34}},
    {"blue", {34, 78, 196}},
    {"green", {42, 150, 62}},
    {"yellow", {238, 206, 42}},
    {"orange", {240, 128, 30}},
    {"purple", {124, 58, 160}},
    {"pink", {236, 122, 172}},
    {"white", {238, 238, 232}},
    {"black", {28, 28, 32}},
    {"brown", {120, 74, 40}},
    {"grey", {128, 128, 132}},
}};

// What an object looks like; each shape has its own nouns.
enum class Shape {
  kCircle,    // a disc with spherical shading
  kBox,       // an axis-aligned rounded rectangle
  kTriangle,  // an isosceles triangle pointing up
  kBus,       // a long rounded body with a row of windows and two wheels
};

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

// Where the picture was "taken".
enum class Backdrop {
  kField,   // sky over grass
  kBeach,   // sky over sand
  kStreet,  // sky over asphalt
  kRoom,    // a painted wall over a wooden floor
  kStudio,  // one smooth grey gradient
};

// The sky above an outdoor backdrop.
enum class Sky {
  kClear,   // blue, lighter towards the horizon
  kCloudy,  // grey with white clouds
  kSunset,  // dark blue over orange
};

struct Object {
  Shape shape = Shape::kCircle;
  int colour = 0;  // index into kColours
  std::string_view noun;
  Rgb rgb;               // the colour as drawn (jittered around the named one)
  float cx = 0, cy = 0;  // centre, pixels
  float hw = 0, hh = 0;  // half extents of the body, pixels
  int windows = 0;       // kBus only
  float area() const { return shape == Shape::kTriangle ? 2 * hw * hh : 4 * hw * hh; }
};

struct Scene {
  int width = 0;
  int height = 0;
  Backdrop backdrop = Backdrop::kField;
  Sky sky = Sky::kClear;
  int wall = 0;       // kRoom: index into kWalls
  float horizon = 0;  // y where the upper part (sky, wall) meets the lower part
  Rgb upper_top, upper_bottom, lower_top, lower_bottom;
  float upper_texture = 0, lower_texture = 0;  // grain amplitude of each part
  std::vector<Object> objects;                 // objects[0] is the one drawn first
};

struct Wall {
  std::string_view name;
  Rgb rgb;
};
constexpr std::array<Wall, 4> kWalls = {{{"beige", {214, 198, 168}},
                                         {"light grey", {200, 200, 198}},
                                         {"pale green", {190, 210, 178}},
                                         {"pale blue", {188, 204, 222}}}};

// Aspect ratios as long:short; each also comes in portrait.
constexpr std::array<std::pair<int, int>, 4> kAspects = {{{1, 1}, {4, 3}, {3, 2}, {16, 9}}};

float Uniform(Rng& rng, float lo, float hi) { return static_cast<float>(rng.Uniform(lo, hi)); }

Scene MakeScene(uint64_t key, int fixed_width, int fixed_height) {
  Rng rng(key);
  Scene s;
  const int long_side = 320 + static_cast<int>(rng.Below(1600 - 320 + 1));
  const auto [al, as] = kAspects[rng.Below(kAspects.size())];
  const int short_side = std::max(1, static_cast<int>(std::lround(double(long_side) * as / al)));
  const bool portrait = al != as && rng.Bernoulli(0.5);
  s.width = portrait ? short_side : long_side;
  s.height = portrait ? long_side : short_side;
  if (fixed_width > 0 && fixed_height > 0) {  // the draws above still happen: same scenes
    s.width = fixed_width;
    s.height = fixed_height;
  }
  const float w = static_cast<float>(s.width), h = static_cast<float>(s.height);

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

  // Objects: distinct colours and nouns, so that every question names one object; the
  // first is large, the rest small; an object that cannot be placed without overlapping
  // is dropped, so the count stays true.
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
  return s;
}

// --- drawing --------------------------------------------------------------------------

constexpr int kCell = 16;          // spacing of the low-resolution noise lattice, pixels
constexpr int kTileA = 256;        // the two grain tiles have coprime sizes, so their sum
constexpr int kTileB = 197;        // does not visibly repeat
constexpr float kObjectGrain = 5;  // grain amplitude on objects

// Per-thread memory reused from one image to the next.
struct Canvas {
  std::vector<uint8_t> pixels;  // RGB, width * 3 per row
  std::vector<float> lattice;   // (gw x gh x 3) colour offsets at lattice nodes
  std::vector<float> row;       // width * 3 float colour of the row being drawn
  std::vector<float> grain;     // width: grain amplitude per pixel
  std::vector<float> lattice_row;
  std::vector<float> tile_a, tile_b;
};

// Value noise: a random value per integer lattice point of octave `octave`, smoothly
// interpolated.
float LatticeValue(uint64_t key, int octave, int x, int y) {
  const uint64_t h =
      HashKeys(key, static_cast<uint64_t>(octave),
               (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y));
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

float ValueNoise(uint64_t key, int octave, float x, float y) {
  const float fx = std::floor(x), fy = std::floor(y);
  const int ix = static_cast<int>(fx), iy = static_cast<int>(fy);
  float tx = x - fx, ty = y - fy;
  tx = tx * tx * (3 - 2 * tx);
  ty = ty * ty * (3 - 2 * ty);
  const float a = LatticeValue(key, octave, ix, iy), b = LatticeValue(key, octave, ix + 1, iy);
  const float c = LatticeValue(key, octave, ix, iy + 1);
  const float d = LatticeValue(key, octave, ix + 1, iy + 1);
  return (a + (b - a) * tx) + ((c + (d - c) * tx) - (a + (b - a) * tx)) * ty;
}

// Smooth multi-octave variation of the backdrop (light falloff, clouds, patches of grass)
// at lattice resolution; upsampled bilinearly while drawing.
void FillLattice(const Scene& s, uint64_t key, int gw, int gh, std::vector<float>& lattice) {
  lattice.resize(static_cast<size_t>(gw) * gh * 3);
  for (int j = 0; j < gh; ++j) {
    const float py = static_cast<float>(j * kCell);
    const bool upper = py < s.horizon;
    for (int i = 0; i < gw; ++i) {
      const float px = static_cast<float>(i * kCell);
      // Octaves from 400 px down to 50 px: finer ones would alias on a 16 px lattice
      // (the grain tiles supply the fine detail).
      float lum = 0, amp = 26, freq = 1.0f / 400;
      for (int octave = 0; octave < 4; ++octave) {
        lum += amp * ValueNoise(key, octave, px * freq, py * freq);
        amp *= 0.5f;
        freq *= 2;
      }
      const float warm = 8 * ValueNoise(key, 9, px / 200, py / 200);
      float* v = &lattice[(static_cast<size_t>(j) * gw + i) * 3];
      if (upper && s.backdrop != Backdrop::kRoom && s.backdrop != Backdrop::kStudio &&
          s.sky == Sky::kCloudy) {
        // Clouds: only the bright half of the noise, pushed towards white.
        // Squared so that cloud edges fade in smoothly instead of creasing.
        const float c = std::max(0.0f, ValueNoise(key, 7, px / 240, py / 110) +
                                           0.5f * ValueNoise(key, 8, px / 110, py / 64));
        lum = lum * 0.4f + 90 * c * c;
      }
      v[0] = lum + warm;
      v[1] = lum;
      v[2] = lum - warm;
    }
  }
}

// Grain: blurred white noise (tile A, structured) plus white noise (tile B, fine), both
// with unit-ish spread.
void FillTiles(uint64_t key, Canvas& c) {
  Rng rng(key);
  std::vector<float>& a = c.tile_a;
  a.resize(kTileA * kTileA);
  std::vector<float> white(kTileA * kTileA);
  for (float& v : white) v = static_cast<float>(rng.Uniform(-1, 1));
  for (int y = 0; y < kTileA; ++y) {
    for (int x = 0; x < kTileA; ++x) {
      float sum = 0;
      for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
          sum += white[((y + dy + kTileA) % kTileA) * kTileA + (x + dx + kTileA) % kTileA];
        }
      }
      a[y * kTileA + x] = sum * (1.7f / 3.0f);  // std of the 3x3 mean of U(-1,1) is 1/(3*1.73)
    }
  }
  c.tile_b.resize(kTileB * kTileB);
  for (float& v : c.tile_b) v = static_cast<float>(rng.Uniform(-1.7, 1.7));
}

float Clamp01(float v) { return std::min(1.0f, std::max(0.0f, v)); }

// Signed distance to a rounded box of half extents (hw, hh) and corner radius r.
float RoundedBoxDistance(float dx, float dy, float hw, float hh, float r) {
  const float qx = std::abs(dx) - hw + r, qy = std::abs(dy) - hh + r;
  const float ox = std::max(qx, 0.0f), oy = std::max(qy, 0.0f);
  return std::sqrt(ox * ox + oy * oy) + std::min(std::max(qx, qy), 0.0f) - r;
}

// Colour and coverage of object `o` at pixel centre (x, y); coverage 0 outside.
struct Paint {
  Rgb rgb;
  float alpha = 0;
};

Paint ShadeObject(const Object& o, float x, float y) {
  constexpr float kEdge = 1.2f;  // anti-aliasing width, pixels
  const float dx = x - o.cx, dy = y - o.cy;
  // Light from the top left: brighter there, darker towards the bottom right.
  const float light = 1.12f - 0.22f * (dy / o.hh) - 0.08f * (dx / o.hw);
  switch (o.shape) {
    case Shape::kCircle: {
      const float r = std::sqrt(dx * dx + dy * dy);
      const float sphere = 1.15f - 0.45f * Clamp01((dx + dy * 1.3f) / (2.2f * o.hw) + 0.5f);
      const float k = sphere;
      return {{o.rgb.r * k, o.rgb.g * k, o.rgb.b * k}, Clamp01((o.hw - r) / kEdge + 0.5f)};
    }
    case Shape::kBox: {
      const float d = RoundedBoxDistance(dx, dy, o.hw, o.hh, std::min(o.hw, o.hh) * 0.08f);
      return {{o.rgb.r * light, o.rgb.g * light, o.rgb.b * light}, Clamp01(0.5f - d / kEdge)};
    }
    case Shape::kTriangle: {
      // Apex (0, -hh), base corners (+-hw, hh): the distance to the sloped edges is the
      // line equation scaled by the edge's length.
      const float len = std::sqrt(4 * o.hh * o.hh + o.hw * o.hw);
      const float side = (2 * o.hh * std::abs(dx) - o.hw * dy - o.hw * o.hh) / len;
      const float d = std::max(side, dy - o.hh);
      return {{o.rgb.r * light, o.rgb.g * light, o.rgb.b * light}, Clamp01(0.5f - d / kEdge)};
    }
    case Shape::kBus: {
      constexpr Rgb kTyre = {24, 24, 26};
      constexpr Rgb kHub = {150, 150, 150};
      constexpr Rgb kGlass = {58, 70, 92};
      const float wheel_r = o.hh * 0.34f;
      for (float side : {-1.0f, 1.0f}) {
        const float wx = dx - side * o.hw * 0.62f, wy = dy - o.hh;
        const float r = std::sqrt(wx * wx + wy * wy);
        const float a = Clamp01((wheel_r - r) / kEdge + 0.5f);
        if (a > 0) {
          const Rgb c = r < wheel_r * 0.45f ? kHub : kTyre;
          return {c, a};
        }
      }
      const float body = RoundedBoxDistance(dx, dy, o.hw, o.hh, o.hh * 0.3f);
      Paint p{{o.rgb.r * light, o.rgb.g * light, o.rgb.b * light}, Clamp01(0.5f - body / kEdge)};
      // Windows: a row of equal cells across the upper half of the body.
      const float band_l = -o.hw * 0.9f, band_w = o.hw * 1.8f;
      const float cell_w = band_w / static_cast<float>(o.windows);
      const float u = (dx - band_l) / cell_w;
      if (u >= 0 && u < static_cast<float>(o.windows)) {
        const float cx = band_l + (std::floor(u) + 0.5f) * cell_w;
        const float wd = RoundedBoxDistance(dx - cx, dy + o.hh * 0.35f, cell_w * 0.38f, o.hh * 0.3f,
                                            o.hh * 0.06f);
        const float a = Clamp01(0.5f - wd / kEdge);
        const float sheen = 1.0f + 0.5f * Clamp01(-(dy + o.hh * 0.35f) / (o.hh * 0.3f));
        p.rgb = Lerp(p.rgb, {kGlass.r * sheen, kGlass.g * sheen, kGlass.b * sheen}, a);
      }
      return p;
    }
  }
  return {};
}

// Draws the scene into c.pixels (RGB, tightly packed).
void Draw(const Scene& s, uint64_t key, Canvas& c) {
  const int w = s.width, h = s.height;
  const int gw = w / kCell + 2, gh = h / kCell + 2;
  FillLattice(s, HashKeys(key, 1), gw, gh, c.lattice);
  FillTiles(HashKeys(key, 2), c);
  c.pixels.resize(static_cast<size_t>(w) * h * 3);
  c.row.resize(static_cast<size_t>(w) * 3);
  c.grain.resize(w);
  c.lattice_row.resize(static_cast<size_t>(gw) * 3);
  const int tile_ax = static_cast<int>(Rng(HashKeys(key, 3)).Below(kTileA));
  const float noise_amp = 3.0f;  // sensor noise, +- levels per channel

  for (int y = 0; y < h; ++y) {
    const float py = static_cast<float>(y) + 0.5f;
    const bool upper = py < s.horizon;
    const Rgb base = upper ? Lerp(s.upper_top, s.upper_bottom, py / std::max(s.horizon, 1.0f))
                           : Lerp(s.lower_top, s.lower_bottom,
                                  (py - s.horizon) / std::max(float(h) - s.horizon, 1.0f));
    const float grain = upper ? s.upper_texture : s.lower_texture;

    // Lattice rows around y, blended vertically once per row.
    const float ly = py / kCell;
    const int j0 = std::min(static_cast<int>(ly), gh - 2);
    const float ty = ly - static_cast<float>(j0);
    const float* l0 = &c.lattice[static_cast<size_t>(j0) * gw * 3];
    const float* l1 = l0 + static_cast<size_t>(gw) * 3;
    for (int i = 0; i < gw * 3; ++i) c.lattice_row[i] = l0[i] + (l1[i] - l0[i]) * ty;

    float* row = c.row.data();
    for (int x = 0; x < w; ++x) {
      const int i0 = x / kCell;
      const float tx = (static_cast<float>(x % kCell) + 0.5f) * (1.0f / kCell);
      const float* a = &c.lattice_row[i0 * 3];
      row[x * 3 + 0] = base.r + a[0] + (a[3] - a[0]) * tx;
      row[x * 3 + 1] = base.g + a[1] + (a[4] - a[1]) * tx;
      row[x * 3 + 2] = base.b + a[2] + (a[5] - a[2]) * tx;
      c.grain[x] = grain;
    }

    for (const Object& o : s.objects) {
      const float top = o.cy - o.hh - 2;
      const float bottom = o.cy + o.hh * (o.shape == Shape::kBus ? 1.36f : 1.0f) + 2;
      if (py < top || py > bottom) continue;
      const int x0 = std::max(0, static_cast<int>(o.cx - o.hw - 2));
      const int x1 = std::min(w, static_cast<int>(o.cx + o.hw + 3));
      for (int x = x0; x < x1; ++x) {
        const Paint p = ShadeObject(o, static_cast<float>(x) + 0.5f, py);
        if (p.alpha <= 0) continue;
        float* px = &row[x * 3];
        px[0] += (p.rgb.r - px[0]) * p.alpha;
        px[1] += (p.rgb.g - px[1]) * p.alpha;
        px[2] += (p.rgb.b - px[2]) * p.alpha;
        c.grain[x] += (kObjectGrain - c.grain[x]) * p.alpha;
      }
    }

    // Grain (luminance) and sensor noise (per channel), then quantize.
    const float* ta = &c.tile_a[static_cast<size_t>((y + tile_ax) % kTileA) * kTileA];
    const float* tb = &c.tile_b[static_cast<size_t>(y % kTileB) * kTileB];
    Rng noise(HashKeys(key, 4, static_cast<uint64_t>(y)));
    uint64_t bits = 0;
    int bits_left = 0;
    uint8_t* out = &c.pixels[static_cast<size_t>(y) * w * 3];
    for (int x = 0; x < w; ++x) {
      const float g = c.grain[x] * (ta[x % kTileA] + 0.6f * tb[x % kTileB]);
      for (int ch = 0; ch < 3; ++ch) {
        if (bits_left == 0) bits = noise.Next(), bits_left = 8;
        const float n = (static_cast<float>(bits & 0xff) - 127.5f) * (noise_amp / 127.5f);
        bits >>= 8;
        --bits_left;
        const float v = row[x * 3 + ch] + g + n;
        out[x * 3 + ch] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)) + 0.5f);
      }
    }
  }
}

// --- conversations --------------------------------------------------------------------

struct QA {
  std::string question;
  std::string answer;
};

template <size_t N>
std::string_view Pick(Rng& rng, const std::string_view (&options)[N]) {
  return options[rng.Below(N)];
}

std::string Capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

std::string_view NumberWord(size_t n) {
  static constexpr std::string_view kWords[] = {"zero", "one",  "two", "three",
                                                "four", "five", "six"};
  return kWords[std::min<size_t>(n, 6)];
}

std::string_view ColourName(const Object& o) { return kColours[o.colour].name; }

std::string Named(const Object& o) { return Cat({ColourName(o), " ", o.noun}); }

// "in the top left corner", "on the right side", "in the centre", ...
std::string Location(const Scene& s, const Object& o) {
  const int col = std::clamp(static_cast<int>(3 * o.cx / static_cast<float>(s.width)), 0, 2);
  const int row = std::clamp(static_cast<int>(3 * o.cy / static_cast<float>(s.height)), 0, 2);
  static constexpr std::string_view kCol[] = {"left", "centre", "right"};
  static constexpr std::string_view kRow[] = {"top", "middle", "bottom"};
  if (col == 1 && row == 1) return "in the centre";
  if (row == 1) return Cat({"on the ", kCol[col], " side"});
  if (col == 1) return Cat({"at the ", kRow[row]});
  return Cat({"in the ", kRow[row], " ", kCol[col], " corner"});
}

std::string BackdropPhrase(const Scene& s) {
  std::string_view sky;
  switch (s.sky) {
    case Sky::kClear: sky = "under a clear blue sky"; break;
    case Sky::kCloudy: sky = "under a cloudy sky"; break;
    case Sky::kSunset: sky = "at sunset"; break;
  }
  switch (s.backdrop) {
    case Backdrop::kField: return Cat({"on a grassy field ", sky});
    case Backdrop::kBeach: return Cat({"on a sandy beach ", sky});
    case Backdrop::kStreet: return Cat({"on a street ", sky});
    case Backdrop::kRoom:
      return Cat({"in a room with a ", kWalls[s.wall].name, " wall and a wooden floor"});
    case Backdrop::kStudio: return "against a plain grey background";
  }
  return {};
}

std::string_view ShapeWord(const Object& o) {
  switch (o.shape) {
    case Shape::kCircle: return "circle";
    case Shape::kBox: return std::abs(o.hw / o.hh - 1) < 0.12f ? "square" : "rectangle";
    case Shape::kTriangle: return "triangle";
    case Shape::kBus: return "bus";
  }
  return {};
}

// Question kinds; each asks about what Draw put in the picture.
enum class Ask {
  kColour,       // the colour of a named object
  kShape,        // the shape of an object named by its colour
  kCount,        // how many objects
  kWhere,        // where an object is
  kDescribe,     // a one-sentence caption
  kExists,       // whether a noun is in the picture
  kLargest,      // the biggest object
  kBackground,   // the backdrop
  kLeftOrRight,  // the relative position of two objects
};
constexpr int kAskKinds = 9;

// One question of kind `ask` and its answer; empty when it does not apply to the scene.
QA Question(Ask ask, const Scene& s, Rng& rng) {
  const auto& objs = s.objects;
  const Object& o = objs[rng.Bernoulli(0.6) ? 0 : rng.Below(objs.size())];
  switch (ask) {
    case Ask::kColour: {
      static constexpr std::string_view kQ[] = {
          "What colour is the ", "What color is the ", "Which colour is the ",
          "Can you tell me the colour of the ", "What is the colour of the "};
      const std::string_view q = Pick(rng, kQ);
      std::string question = Cat({q, o.noun, rng.Bernoulli(0.4) ? " in the picture?" : "?"});
      switch (rng.Below(3)) {
        case 0: return {question, Capitalized(Cat({ColourName(o), "."}))};
        case 1: return {question, Cat({"The ", o.noun, " is ", ColourName(o), "."})};
        default: return {question, Cat({"It is ", ColourName(o), "."})};
      }
    }
    case Ask::kShape: {
      if (o.shape == Shape::kBus) return {};
      static constexpr std::string_view kQ[] = {"What shape is the ", "What is the shape of the ",
                                                "Describe the shape of the "};
      std::string question =
          Cat({Pick(rng, kQ), ColourName(o), rng.Bernoulli(0.5) ? " object?" : " thing?"});
      const std::string_view shape = ShapeWord(o);
      const std::string_view article = "a ";
      switch (rng.Below(3)) {
        case 0: return {question, Cat({"It is ", article, shape, "."})};
        case 1: return {question, Capitalized(Cat({article, shape, "."}))};
        default:
          return {question, Cat({"It is ", article, ColourName(o), " ", shape, ", probably a ",
                                 o.noun, "."})};
      }
    }
    case Ask::kCount: {
      static constexpr std::string_view kQ[] = {
          "How many objects are there?", "How many objects can you see?",
          "How many shapes are in the image?", "Count the objects in this picture."};
      std::string question(Pick(rng, kQ));
      const size_t n = objs.size();
      if (n == 1) {
        return {question, rng.Bernoulli(0.5) ? "There is one object." : "Just one."};
      }
      switch (rng.Below(3)) {
        case 0: return {question, Capitalized(Cat({NumberWord(n), "."}))};
        case 1: return {question, Cat({"There are ", NumberWord(n), " objects."})};
        default: return {question, Cat({"I can see ", NumberWord(n), " objects."})};
      }
    }
    case Ask::kWhere: {
      static constexpr std::string_view kQ[] = {"Where is the ", "Where is the ",
                                                "In which part of the image is the "};
      const bool with_colour = rng.Bernoulli(0.4);
      std::string question =
          Cat({Pick(rng, kQ), with_colour ? Named(o) : std::string(o.noun), "?"});
      const std::string where = Location(s, o);
      return {question, rng.Bernoulli(0.5) ? Cat({"It is ", where, "."})
                                           : Cat({"The ", o.noun, " is ", where, "."})};
    }
    case Ask::kDescribe: {
      static constexpr std::string_view kQ[] = {"Describe the image briefly.", "What do you see?",
                                                "Give a short description of this picture.",
                                                "What is in this image?",
                                                "Write a one-sentence caption for the image."};
      std::string question(Pick(rng, kQ));
      const Object& main = objs[0];
      std::string caption = Cat({"A ", main.area() > 0.08f * s.width * s.height ? "large " : "",
                                 Named(main), " ", Location(s, main), ", ", BackdropPhrase(s)});
      for (size_t i = 1; i < objs.size(); ++i) {
        caption += i == 1 ? ", next to a " : (i + 1 == objs.size() ? " and a " : ", a ");
        if (i == 1) caption += "small ";
        caption += Named(objs[i]);
      }
      return {question, caption + "."};
    }
    case Ask::kExists: {
      static constexpr std::string_view kAll[] = {
          "ball", "balloon", "plate", "clock", "coin", "box",  "crate", "sign",
          "book", "tile",    "tent",  "sail",  "flag", "roof", "cone",  "bus"};
      const std::string_view noun = rng.Bernoulli(0.5) ? o.noun : Pick(rng, kAll);
      std::string question = Cat({"Is there a ", noun, " in the image?"});
      const auto it =
          std::find_if(objs.begin(), objs.end(), [&](const Object& x) { return x.noun == noun; });
      if (it == objs.end()) return {question, Cat({"No, there is no ", noun, "."})};
      return {question, Cat({"Yes, there is a ", Named(*it), " ", Location(s, *it), "."})};
    }
    case Ask::kLargest: {
      if (objs.size() < 2) return {};
      std::vector<const Object*> by_area;
      for (const Object& x : objs) by_area.push_back(&x);
      std::sort(by_area.begin(), by_area.end(),
                [](const Object* a, const Object* b) { return a->area() > b->area(); });
      if (by_area[0]->area() < 1.3f * by_area[1]->area()) return {};  // too close to call
      static constexpr std::string_view kQ[] = {"What is the largest object?",
                                                "Which object is the biggest?",
                                                "Which object takes up the most space?"};
      std::string question(Pick(rng, kQ));
      return {question, rng.Bernoulli(0.5)
                            ? Cat({"The ", Named(*by_area[0]), "."})
                            : Cat({"The largest object is the ", Named(*by_area[0]), "."})};
    }
    case Ask::kBackground: {
      const bool one = objs.size() == 1;
      static constexpr std::string_view kQ[] = {"What is in the background?",
                                                "Where was this picture taken?", "What is behind "};
      std::string question(Pick(rng, kQ));
      if (question.ends_with(' ')) question += one ? "the object?" : "the objects?";
      return {question, Cat({one ? "The object is " : "The objects are ", BackdropPhrase(s), "."})};
    }
    case Ask::kLeftOrRight: {
      if (objs.size() < 2) return {};
      const Object& a = objs[0];
      const Object& b = objs[1 + rng.Below(objs.size() - 1)];
      if (std::abs(a.cx - b.cx) < 0.1f * static_cast<float>(s.width)) return {};
      std::string question =
          Cat({"Is the ", a.noun, " to the left or to the right of the ", b.noun, "?"});
      return {question, Cat({"The ", a.noun, " is to the ", a.cx < b.cx ? "left" : "right",
                             " of the ", Named(b), "."})};
    }
  }
  return {};
}

std::vector<QA> MakeConversation(const Scene& s, uint64_t key) {
  Rng rng(key);
  const double u = rng.Uniform();
  const size_t turns = u < 0.4 ? 1 : (u < 0.75 ? 2 : 3);
  std::array<int, kAskKinds> kinds;
  for (int i = 0; i < kAskKinds; ++i) kinds[i] = i;
  std::vector<QA> out;
  for (int i = 0; i < kAskKinds && out.size() < turns; ++i) {
    std::swap(kinds[i], kinds[i + rng.Below(kAskKinds - i)]);
    QA qa = Question(static_cast<Ask>(kinds[i]), s, rng);
    if (!qa.question.empty()) out.push_back(std::move(qa));
  }
  out[0].question = "<image>\n" + out[0].question;  // kColour and kCount always apply
  return out;
}

// --- output ---------------------------------------------------------------------------

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string ManifestLine(const std::string& id, const std::string& image,
                         const std::vector<QA>& conversation, const std::string& video = "",
                         const std::string& audio = "", const std::string& ocr_image = "",
                         const std::vector<std::string>& ocr_lines = {},
                         const std::string& pointcloud = "", const std::string& pointcloud_pcd = "",
                         const std::string& speech = "", const std::string& speech_text = "") {
  std::string line = "{\"id\":";
  AppendJsonString(line, id);
  line += ",\"image\":";
  AppendJsonString(line, image);
  if (!video.empty()) {
    line += ",\"video\":";
    AppendJsonString(line, video);
  }
  if (!audio.empty()) {
    line += ",\"audio\":";
    AppendJsonString(line, audio);
  }
  if (!speech.empty()) {
    line += ",\"speech\":";
    AppendJsonString(line, speech);
    line += ",\"speech_text\":";
    AppendJsonString(line, speech_text);
  }
  if (!ocr_image.empty()) {
    line += ",\"ocr_image\":";
    AppendJsonString(line, ocr_image);
    std::string text;
    for (const std::string& l : ocr_lines) text += (text.empty() ? "" : "\n") + l;
    line += ",\"ocr_text\":";
    AppendJsonString(line, text);
  }
  if (!pointcloud.empty()) {
    line += ",\"pointcloud\":";
    AppendJsonString(line, pointcloud);
  }
  if (!pointcloud_pcd.empty()) {
    line += ",\"pointcloud_pcd\":";
    AppendJsonString(line, pointcloud_pcd);
  }
  line += ",\"conversations\":[";
  for (size_t i = 0; i < conversation.size(); ++i) {
    if (i > 0) line += ',';
    line += "{\"from\":\"human\",\"value\":";
    AppendJsonString(line, conversation[i].question);
    line += "},{\"from\":\"gpt\",\"value\":";
    AppendJsonString(line, conversation[i].answer);
    line += '}';
  }
  line += "]}\n";
  return line;
}

Status WriteFile(const fs::path& path, const void* data, size_t size) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) return Status::IoError("cannot create " + path.string());
  if (std::fwrite(data, 1, size, file.get()) != size) {
    return Status::IoError("cannot write " + path.string());
  }
  if (std::fclose(file.release()) != 0) return Status::IoError("cannot write " + path.string());
  return Status::Ok();
}

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
struct TjFree {
  void operator()(unsigned char* buffer) const { tjFree(buffer); }
};

// One worker's reusable state: the canvas and the JPEG encoder with its output buffer.
class ImageWriter {
 public:
  Status Init() {
    handle_.reset(tjInitCompress());
    if (handle_ == nullptr) return Status::Internal("tjInitCompress failed");
    return Status::Ok();
  }

  // Draws `scene` and writes it as a q90 4:2:0 JPEG; returns the file size.
  Result<int64_t> Write(const Scene& scene, uint64_t key, const fs::path& path) {
    Draw(scene, key, canvas_);
    const unsigned long needed = tjBufSize(scene.width, scene.height, TJSAMP_420);
    if (needed > capacity_) {
      jpeg_.reset(tjAlloc(static_cast<int>(needed)));
      if (jpeg_ == nullptr) return Status::ResourceExhausted("tjAlloc failed");
      capacity_ = needed;
    }
    unsigned char* buffer = jpeg_.get();
    unsigned long size = capacity_;
    if (tjCompress2(handle_.get(), canvas_.pixels.data(), scene.width, 0, scene.height, TJPF_RGB,
                    &buffer, &size, TJSAMP_420, 90, TJFLAG_NOREALLOC) != 0) {
      return Status::Internal(std::string("tjCompress2: ") + tjGetErrorStr2(handle_.get()));
    }
    HR_RETURN_IF_ERROR(WriteFile(path, buffer, size));
    return static_cast<int64_t>(size);
  }

 private:
  std::unique_ptr<void, TjDeleter> handle_;
  std::unique_ptr<unsigned char, TjFree> jpeg_;
  unsigned long capacity_ = 0;
  Canvas canvas_;
};

// The sample's clip: its scene drawn small once, then panned 3 px a frame (wrapping), so
// that consecutive frames differ and a decoder's frame choice shows.
Result<int64_t> WriteClip(uint64_t scene_key, uint64_t key, const fs::path& path) {
  constexpr int kWidth = 160, kHeight = 120;
  const Scene scene = MakeScene(scene_key, kWidth, kHeight);  // the same scene, small
  thread_local Canvas canvas;
  Draw(scene, key, canvas);
  av::VideoClip clip;
  clip.width = kWidth;
  clip.height = kHeight;
  clip.frames = 20;
  clip.fps = 10;
  clip.gop = 10;
  clip.paint = [&](int frame, uint8_t* rgb) {
    const int shift = 3 * frame;
    for (int y = 0; y < kHeight; ++y) {
      const uint8_t* src = canvas.pixels.data() + static_cast<size_t>(y) * kWidth * 3;
      uint8_t* dst = rgb + static_cast<size_t>(y) * kWidth * 3;
      for (int x = 0; x < kWidth; ++x) {
        std::memcpy(dst + 3 * x, src + 3 * ((x + shift) % kWidth), 3);
      }
    }
  };
  HR_RETURN_IF_ERROR(av::WriteVideo(path.string(), clip));
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::IoError("cannot stat " + path.string() + ": " + ec.message());
  return static_cast<int64_t>(size);
}

// Sample i's audio: 1.5 s of a tone at AudioToneHz(i), 16 kHz mono, faded in and out
// over 50 ms.
Result<int64_t> WriteTone(int64_t i, const fs::path& path) {
  constexpr int kRate = 16000;
  constexpr double kSeconds = 1.5, kFade = 0.05;
  av::AudioClip clip;
  clip.sample_rate = kRate;
  clip.channels = 1;
  clip.seconds = kSeconds;
  const double hz = AudioToneHz(i);
  clip.sample = [hz](int64_t k, int) {
    const double t = static_cast<double>(k) / kRate;
    const double fade = std::min({1.0, t / kFade, (kSeconds - t) / kFade});
    return static_cast<float>(0.6 * fade * std::sin(2 * M_PI * hz * t));
  };
  HR_RETURN_IF_ERROR(av::WriteAudio(path.string(), clip));
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::IoError("cannot stat " + path.string() + ": " + ec.message());
  return static_cast<int64_t>(size);
}

class SentenceList : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceList(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return i_ >= sentences_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return sentences_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  size_t i_ = 0;
};

// SentencePiece loads every sentence into memory; past this many, a stride sample of the
// conversations is used (deterministically, unlike SentencePiece's own sampling).
constexpr size_t kMaxTrainingSentences = 200'000;

}  // namespace

Result<std::string> TrainChatTokenizer(const std::vector<std::string>& sentences,
                                       int vocab_size) {
  SentenceList iterator(sentences);
  // No model_prefix: the trainer would record it (an absolute path) inside the model,
  // and the files would differ by where they were written.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"hard_vocab_limit", "false"},
      {"character_coverage", "1.0"},
      {"user_defined_symbols", "<image>,<|system|>,<|user|>,<|assistant|>"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"num_threads", "1"},  // BPE training is serial anyway; keeps the model reproducible
      {"minloglevel", "2"},  // SentencePiece logs every step at INFO
  };
  std::string model;
  const auto trained = sentencepiece::SentencePieceTrainer::Train(args, &iterator, &model);
  if (!trained.ok()) {
    return Status::InvalidArgument("training the tokenizer failed: " + trained.ToString());
  }
  return model;
}

namespace {

Status TrainTokenizer(const std::vector<std::vector<QA>>& conversations,
                      const MakeSampleOptions& options) {
  size_t total = 0;
  for (const auto& c : conversations) total += 2 * c.size();
  const size_t stride =
      std::max<size_t>(1, (total + kMaxTrainingSentences - 1) / kMaxTrainingSentences);
  std::vector<std::string> sentences;
  for (size_t i = 0; i < conversations.size(); i += stride) {
    for (const QA& qa : conversations[i]) {
      sentences.push_back(qa.question);
      sentences.push_back(qa.answer);
    }
  }
  HR_ASSIGN_OR_RETURN(const std::string model, TrainChatTokenizer(sentences, options.vocab_size));
  // The .vocab file as spm_train writes it: "piece<TAB>score" per id.
  sentencepiece::SentencePieceProcessor sp;
  const auto loaded = sp.LoadFromSerializedProto(model);
  if (!loaded.ok()) {
    return Status::Internal("the trained tokenizer does not load: " + loaded.ToString());
  }
  std::ostringstream vocab;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    vocab << sp.IdToPiece(id) << '\t' << sp.GetScore(id) << '\n';
  }
  const fs::path root(options.out_dir);
  HR_RETURN_IF_ERROR(WriteFile(root / "tokenizer.model", model.data(), model.size()));
  const std::string vocab_text = vocab.str();
  return WriteFile(root / "tokenizer.vocab", vocab_text.data(), vocab_text.size());
}

}  // namespace

Result<MakeSampleStats> MakeSample(const MakeSampleOptions& options) {
  const Clock::time_point start = Clock::now();
  if (options.out_dir.empty()) return Status::InvalidArgument("make-sample: out_dir is required");
  if (options.samples < 1) {
    return Status::InvalidArgument("make-sample: samples must be at least 1");
  }
  if (options.threads < 0) return Status::InvalidArgument("make-sample: threads must be >= 0");
  if (options.width < 0 || options.height < 0 || (options.width > 0) != (options.height > 0) ||
      options.width > 8192 || options.height > 8192) {
    return Status::InvalidArgument("make-sample: size must be WxH with both in 1..8192");
  }

  const fs::path root(options.out_dir);
  std::error_code ec;
  const bool speech = options.audio && !options.espeak.empty();
  for (const char* dir : {"images", "videos", "audio", "speech", "ocr", "pointclouds"}) {
    if (std::string_view(dir) == "videos" && !options.video) continue;
    if (std::string_view(dir) == "audio" && !options.audio) continue;
    if (std::string_view(dir) == "speech" && !speech) continue;
    if (std::string_view(dir) == "ocr" && !options.ocr) continue;
    if (std::string_view(dir) == "pointclouds" && !options.pointcloud) continue;
    fs::create_directories(root / dir, ec);
    if (ec) return Status::IoError("cannot create " + (root / dir).string() + ": " + ec.message());
  }

  const int64_t n = options.samples;
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, n));

  std::vector<std::string> lines(n);
  std::vector<std::vector<QA>> conversations(n);
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> image_bytes{0};
  std::atomic<int64_t> video_bytes{0};
  std::atomic<int64_t> audio_bytes{0};
  std::atomic<int64_t> speech_bytes{0};
  std::atomic<int64_t> ocr_bytes{0};
  std::atomic<int64_t> pointcloud_bytes{0};
  std::atomic<int64_t> pointcloud_pcd_bytes{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status first_error;  // guarded by error_mutex

  auto work = [&] {
    ImageWriter writer;
    Status status = writer.Init();
    while (status.ok() && !failed.load(std::memory_order_relaxed)) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      const uint64_t key = HashKeys(options.seed, static_cast<uint64_t>(i));
      const Scene scene = MakeScene(HashKeys(key, 0), options.width, options.height);
      char id[32];
      std::snprintf(id, sizeof(id), "%06lld", static_cast<long long>(i));
      const std::string image = std::string("images/") + id + ".jpg";
      auto size = writer.Write(scene, HashKeys(key, 1), root / image);
      if (!size.ok()) {
        status = size.status();
        break;
      }
      image_bytes.fetch_add(*size, std::memory_order_relaxed);
      std::string video;
      if (options.video) {
        video = std::string("videos/") + id + ".mp4";
        auto clip = WriteClip(HashKeys(key, 0), HashKeys(key, 1), root / video);
        if (!clip.ok()) {
          status = clip.status();
          break;
        }
        video_bytes.fetch_add(*clip, std::memory_order_relaxed);
      }
      std::string audio;
      if (options.audio) {
        audio = std::string("audio/") + id + ".wav";
        auto tone = WriteTone(i, root / audio);
        if (!tone.ok()) {
          status = tone.status();
          break;
        }
        audio_bytes.fetch_add(*tone, std::memory_order_relaxed);
      }
      std::string speech_file, speech_text;
      if (speech) {
        speech_file = std::string("speech/") + id + ".wav";
        speech_text = SpeechText(i);
        auto spoken = WriteSpeech(options.espeak, speech_text, root / speech_file);
        if (!spoken.ok()) {
          status = spoken.status();
          break;
        }
        speech_bytes.fetch_add(*spoken, std::memory_order_relaxed);
      }
      std::string ocr_image;
      if (options.ocr) {
        ocr_image = std::string("ocr/") + id + ".png";
        auto page = WriteOcrPage(i, root / ocr_image);
        if (!page.ok()) {
          status = page.status();
          break;
        }
        ocr_bytes.fetch_add(*page, std::memory_order_relaxed);
      }
      std::string pointcloud, pointcloud_pcd;
      if (options.pointcloud) {
        pointcloud = std::string("pointclouds/") + id + ".bin";
        auto cloud = WritePointCloud(key, (root / pointcloud).string());
        if (!cloud.ok()) {
          status = cloud.status();
          break;
        }
        pointcloud_bytes.fetch_add(*cloud, std::memory_order_relaxed);
        pointcloud_pcd = std::string("pointclouds/") + id + ".pcd";
        auto pcd =
            WritePointCloudPcd(key, PointCloudPcdForm(i), (root / pointcloud_pcd).string());
        if (!pcd.ok()) {
          status = pcd.status();
          break;
        }
        pointcloud_pcd_bytes.fetch_add(*pcd, std::memory_order_relaxed);
      }
      conversations[i] = MakeConversation(scene, HashKeys(key, 2));
      lines[i] = ManifestLine(id, image, conversations[i], video, audio, ocr_image,
                              options.ocr ? OcrLines(i) : std::vector<std::string>{}, pointcloud,
                              pointcloud_pcd, speech_file, speech_text);
    }
    if (!status.ok()) {
      failed.store(true);
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_error.ok()) first_error = status;
    }
  };
  {
    std::vector<std::jthread> workers;
    for (int t = 1; t < threads; ++t) workers.emplace_back(work);
    work();
  }
  if (!first_error.ok()) return first_error;

  std::string manifest;
  for (const std::string& line : lines) manifest += line;
  HR_RETURN_IF_ERROR(WriteFile(root / "manifest.jsonl", manifest.data(), manifest.size()));
  HR_RETURN_IF_ERROR(TrainTokenizer(conversations, options));

  MakeSampleStats stats;
  stats.samples = n;
  stats.image_bytes = image_bytes.load();
  stats.video_bytes = video_bytes.load();
  stats.audio_bytes = audio_bytes.load();
  stats.speech_clips = speech ? n : 0;
  stats.speech_bytes = speech_bytes.load();
  stats.ocr_bytes = ocr_bytes.load();
  stats.pointcloud_bytes = pointcloud_bytes.load();
  stats.pointcloud_pcd_bytes = pointcloud_pcd_bytes.load();
  stats.seconds = SecondsSince(start);
  return stats;
}

}  // namespace headrace
