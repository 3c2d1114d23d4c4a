#include "headrace/observe/crash_trace.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace headrace {
namespace {

// A frame of its own in the trace: not inlined into the death test's statement.
[[gnu::noinline]] void FaultHere() { raise(SIGSEGV); }

TEST(CrashTraceDeathTest, AFatalSignalWritesTheNativeStackThenDiesOfIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        InstallCrashTrace();
        InstallCrashTrace();  // a second install keeps the first's previous handler
        FaultHere();
      },
      "headrace: fatal signal 11 \\(SIGSEGV\\) in thread [0-9]+ at address 0x[0-9a-f]+; "
      "native stack:\n  #0 [^\n]+\n  #1 ");
}

TEST(CrashTraceDeathTest, AnAbortIsTracedAsWell) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        InstallCrashTrace();
        abort();
      },
      "headrace: fatal signal 6 \\(SIGABRT\\)");
}

}  // namespace
}  // namespace headrace
