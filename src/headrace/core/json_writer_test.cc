#include "headrace/core/json_writer.h"

#include <gtest/gtest.h>

#include <limits>

namespace headrace {
namespace {

TEST(JsonWriter, WritesNestedDocumentsCompactly) {
  JsonWriter w(/*pretty=*/false);
  w.BeginObject().Key("a").Int(1).Key("b").BeginArray().Double(0.5).Bool(true).Null().EndArray();
  w.Key("c").BeginObject().EndObject().EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"b":[0.5,true,null],"c":{}})");
}

TEST(JsonWriter, EscapesStringsAndNonFiniteNumbers) {
  JsonWriter w(false);
  w.BeginArray().String("q\"\\\n\x01").Double(std::numeric_limits<double>::infinity()).EndArray();
  EXPECT_EQ(w.str(), R"(["q\"\\\n\u0001",null])");
}

// A name from a tar shard or a file system may hold any bytes: the document stays UTF-8
// (a run report with a tar member's raw name in a URI did not parse).
TEST(JsonWriter, WritesInvalidUtf8AsReplacementCharacters) {
  JsonWriter w(false);
  w.BeginObject().Key("k\xff").String("shard.tar#b\xff\xfe\xc3\xa9").EndObject();
  EXPECT_EQ(w.str(), "{\"k\xEF\xBF\xBD\":\"shard.tar#b\xEF\xBF\xBD\xEF\xBF\xBD\xc3\xa9\"}");
}

}  // namespace
}  // namespace headrace
