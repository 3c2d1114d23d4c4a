// hr_vision_reference_tool: the vision kernels on raw files, for
// tests/python/test_vlm_reference.py, which compares them with transformers and PIL.
// Test-only (built with the tests, not installed). Raw images are packed rows of
// width * channels bytes; several frames are concatenated.
//
//   sizes PATCH MERGE MIN_PIXELS MAX_PIXELS MAX_ASPECT < "W H" lines
//       -> one line per input: "W H" of SmartResizeSize, or "error <message>"
//   resize IN OUT W H C OUT_W OUT_H bicubic|bilinear          (PilResize)
//   patchify IN OUT W H C FRAMES qwen2_vl|qwen2_5_vl|qwen3_vl f32|bf16
//       -> OUT: pixel_values rows; stdout "T H W" (the grid)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "headrace/ops/image/smart_resize.h"
#include "headrace/ops/vision/patchify.h"
#include "headrace/ops/vision/preset.h"

namespace headrace {
namespace {

int Fail(const std::string& message) {
  std::cerr << "hr_vision_reference_tool: " << message << "\n";
  return 1;
}

bool ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

bool WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

int SizesCommand(char** argv) {
  SmartResizeRule rule;
  rule.patch_size = std::atoi(argv[0]);
  rule.merge_size = std::atoi(argv[1]);
  rule.min_pixels = std::atoll(argv[2]);
  rule.max_pixels = std::atoll(argv[3]);
  rule.max_aspect_ratio = std::atof(argv[4]);
  int w = 0, h = 0;
  while (std::cin >> w >> h) {
    const Result<ImageSize> s = SmartResizeSize(w, h, rule);
    if (s.ok()) {
      std::cout << s->width << " " << s->height << "\n";
    } else {
      std::cout << "error " << s.status().message() << "\n";
    }
  }
  return 0;
}

int ResizeCommand(char** argv) {
  std::vector<uint8_t> in;
  if (!ReadFile(argv[0], &in)) return Fail(std::string("cannot read ") + argv[0]);
  const int w = std::atoi(argv[2]), h = std::atoi(argv[3]), c = std::atoi(argv[4]);
  const int ow = std::atoi(argv[5]), oh = std::atoi(argv[6]);
  const std::string filter = argv[7];
  if (in.size() != static_cast<size_t>(w) * h * c) return Fail("input size mismatch");
  const ImageView src{in.data(), w, h, c, int64_t{w} * c};
  Result<Image> out = PilResize(
      src, ow, oh, filter == "bilinear" ? ResampleFilter::kBilinear : ResampleFilter::kBicubic);
  if (!out.ok()) return Fail(out.status().ToString());
  const ImageView v = out->view();
  std::vector<uint8_t> packed;
  for (int y = 0; y < v.height; ++y) packed.insert(packed.end(), v.row(y), v.row(y) + ow * c);
  return WriteFile(argv[1], packed.data(), packed.size()) ? 0 : Fail("cannot write output");
}

int PatchifyCommand(char** argv) {
  std::vector<uint8_t> in;
  if (!ReadFile(argv[0], &in)) return Fail(std::string("cannot read ") + argv[0]);
  const int w = std::atoi(argv[2]), h = std::atoi(argv[3]), c = std::atoi(argv[4]);
  const int frames = std::atoi(argv[5]);
  const std::string preset = argv[6], dtype = argv[7];
  const size_t frame_bytes = static_cast<size_t>(w) * h * c;
  if (frames < 1 || in.size() != frame_bytes * frames) return Fail("input size mismatch");
  const VisionPreset* p = nullptr;
  for (const auto& [model, name] : TableOf(VisionModel{})) {
    if (name == preset) p = FindVisionPreset(model);
  }
  if (p == nullptr) return Fail("unknown preset " + preset);
  const PatchifyParams params{.patch_size = p->patch_size,
                              .temporal_patch_size = p->temporal_patch_size,
                              .merge_size = p->merge_size,
                              .mean = p->image_mean,
                              .std = p->image_std,
                              .dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32};
  Result<PatchifyKernel> kernel = PatchifyKernel::Make(params);
  if (!kernel.ok()) return Fail(kernel.status().ToString());
  std::vector<ImageView> views;
  for (int f = 0; f < frames; ++f) {
    views.push_back(ImageView{in.data() + f * frame_bytes, w, h, c, int64_t{w} * c});
  }
  Result<PatchGrid> grid = kernel->Grid(w, h, frames);
  if (!grid.ok()) return Fail(grid.status().ToString());
  std::vector<float> out(kernel->Bytes(*grid) / sizeof(float) + 1);  // float-aligned
  std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(out.data()), kernel->Bytes(*grid));
  Result<PatchGrid> written = kernel->Into(views, bytes);
  if (!written.ok()) return Fail(written.status().ToString());
  std::cout << written->t << " " << written->h << " " << written->w << "\n";
  return WriteFile(argv[1], bytes.data(), bytes.size()) ? 0 : Fail("cannot write output");
}

}  // namespace
}  // namespace headrace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "sizes" && argc == 7) return headrace::SizesCommand(argv + 2);
  if (command == "resize" && argc == 10) return headrace::ResizeCommand(argv + 2);
  if (command == "patchify" && argc == 10) return headrace::PatchifyCommand(argv + 2);
  std::fprintf(stderr, "usage: see the comment at the top of reference_tool_main.cc\n");
  return 2;
}
