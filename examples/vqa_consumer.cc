// A C++ trainer's view of Headrace: build the pipeline from YAML, iterate batches,
// read the tensors. Uses only the public headers.
//
//   build/examples/vqa_consumer examples/vqa.yaml
#include <cstdio>

#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CONFIG\n", argv[0]);
    return 2;
  }
  auto spec = headrace::LoadPipelineConfig(argv[1], {"epochs=1"});
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    return 2;
  }
  auto loader = headrace::Loader::Make(*spec);
  if (!loader.ok()) {
    std::fprintf(stderr, "%s\n", loader.status().ToString().c_str());
    return 1;
  }
  double checksum = 0;
  int64_t tokens = 0;
  while (true) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) {
      std::fprintf(stderr, "%s\n", batch.status().ToString().c_str());
      return 1;
    }
    if (!batch->has_value()) break;
    const headrace::Batch& b = **batch;
    // A trainer would copy these to the GPU; here we touch them.
    const headrace::Tensor* image = b.Find("image");
    const headrace::Tensor* mask = b.Find("attention_mask");
    checksum += image->data<float>()[0];
    for (int64_t i = 0; i < mask->numel(); ++i) tokens += mask->data<int64_t>()[i];
    if (b.global_index == 0) {
      for (const auto& [name, tensor] : b.fields) {
        std::printf("%-15s %s\n", name.c_str(), tensor.ToString().c_str());
      }
    }
  }
  const auto stats = (*loader)->consumer_stats();
  std::printf(
      "%lld batches, %lld samples, %lld tokens, first batch %.3f s, wait-time ratio %.3f "
      "(checksum %.3f)\n",
      static_cast<long long>(stats.batches), static_cast<long long>(stats.samples),
      static_cast<long long>(tokens), stats.time_to_first_batch_s, stats.wait_time_ratio(),
      checksum);
  return 0;
}
