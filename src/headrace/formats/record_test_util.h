// Test helper: two SampleRecords equal field for field (the sources' compact record
// stores against the records they stand for).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>

#include "headrace/core/sample.h"

namespace headrace::testing {

inline void ExpectSameRecord(const SampleRecord& got, const SampleRecord& want) {
  EXPECT_EQ(got.id, want.id);
  EXPECT_EQ(got.location, want.location);
  EXPECT_EQ(got.uri(), want.uri());
  EXPECT_EQ(got.line, want.line);
  EXPECT_EQ(got.status.code(), want.status.code());
  EXPECT_EQ(got.status.message(), want.status.message());
  ASSERT_EQ(got.media.size(), want.media.size());
  for (size_t i = 0; i < got.media.size(); ++i) {
    EXPECT_EQ(got.media[i].field, want.media[i].field);
    EXPECT_EQ(got.media[i].uri, want.media[i].uri);
    EXPECT_EQ(got.media[i].offset, want.media[i].offset);
    EXPECT_EQ(got.media[i].length, want.media[i].length);
  }
  ASSERT_EQ(got.turns.size(), want.turns.size());
  for (size_t i = 0; i < got.turns.size(); ++i) {
    EXPECT_EQ(got.turns[i].role, want.turns[i].role);
    EXPECT_EQ(got.turns[i].text, want.turns[i].text);
  }
  ASSERT_EQ(got.attributes.size(), want.attributes.size());
  for (size_t i = 0; i < got.attributes.size(); ++i) {
    EXPECT_EQ(got.attributes[i].field, want.attributes[i].field);
    EXPECT_EQ(got.attributes[i].value, want.attributes[i].value);
  }
}

}  // namespace headrace::testing
