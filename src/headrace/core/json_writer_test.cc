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

}  // namespace
}  // namespace headrace
