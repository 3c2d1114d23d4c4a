#include "materialize.h"

#include <gtest/gtest.h>

namespace headrace {
namespace materialize_test {

TEST(RandomOps, NamesTheOpsWhoseOutputChangesWithTheSeedAndEpoch) {
  PipelineSpec spec;
  VideoDecodeSpec spread;  // frames spread over the whole video: no draw
  VideoDecodeSpec clip;
  clip.clip_seconds = 1.0;
  AudioCropSpec centred;
  centred.start = ClipStart::kCenter;
  spec.ops = {DecodeSpec{},          FlipSpec{.p = 0.5}, FlipSpec{.p = 1.0},
              GrayscaleSpec{.p = 0}, RandomResizedCropSpec{}, spread,
              clip,                  centred,            AudioCropSpec{}};
  EXPECT_EQ(RandomOps(spec),
            (std::vector<std::string>{"ops[1].image.flip", "ops[4].image.random_resized_crop",
                                      "ops[6].video.decode", "ops[8].audio.crop"}));
  spec.ops = {DecodeSpec{}, ResizeSpec{}, NormalizeSpec{}};
  EXPECT_TRUE(RandomOps(spec).empty());
}

TEST(Materialize, RandomOpsWithoutEpochsAreRefusedNamingThemBeforeAnyWork) {
  MaterializeOptions options;
  options.spec.source.manifest = "/nonexistent/manifest.jsonl";
  options.spec.ops = {DecodeSpec{}, FlipSpec{.p = 0.5}, ColorJitterSpec{}};
  options.out_dir = "/nonexistent/out";
  auto info = Materialize(options);
  ASSERT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("ops[1].image.flip, ops[2].image.color_jitter draw "
                                         "randomness"),
            std::string::npos)
      << info.status().message();
  EXPECT_NE(info.status().message().find("--epochs"), std::string::npos);
}

TEST(Materialize, AMaterializedSourceIsNotMaterializedAgain) {
  MaterializeOptions options;
  options.spec.source.materialized = "/some/where";
  EXPECT_EQ(Materialize(options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace materialize_test
}  // namespace headrace
