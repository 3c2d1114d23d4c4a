// Drawing a scene: a backdrop with smooth light variation (value noise on a lattice),
// grain and sensor noise, and the objects anti-aliased with simple shading, so that the
// JPEGs compress and decode like photographs rather than flat test cards.
#include <algorithm>
#include <cmath>

#include "headrace/core/rng.h"
#include "make_sample/make_sample_internal.h"

namespace headrace::make_sample_detail {
namespace {

constexpr int kCell = 16;          // spacing of the low-resolution noise lattice, pixels
constexpr int kTileA = 256;        // the two grain tiles have coprime sizes, so their sum
constexpr int kTileB = 197;        // does not visibly repeat
constexpr float kObjectGrain = 5;  // grain amplitude on objects

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

}  // namespace

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

}  // namespace headrace::make_sample_detail
