// The `headrace` command line: one function per subcommand, each taking the arguments
// after its name and returning the process exit code (0 ok, 1 run failed, 2 usage or
// configuration error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace headrace {
class ObjectStore;
}  // namespace headrace

namespace headrace::tools {

using Args = std::vector<std::string>;

int RunCommand(const Args& args);         // headrace run CONFIG ...
int MakeSampleCommand(const Args& args);  // headrace make-sample --out DIR ...
int BenchCommand(const Args& args);       // headrace bench ops|engine CONFIG ...
int BenchIoCommand(const Args& args);     // headrace bench io [...] (args after "io")
int BenchServeCommand(const Args& args);  // headrace bench serve DIR [--latency-ms 20]
int BenchBalanceCommand(const Args& args);  // headrace bench balance CONFIG [...]
int UploadCommand(const Args& args);      // headrace upload DIR s3://bucket/prefix ...
int ListCommand(const Args& args);        // headrace ls s3://bucket/prefix-or-glob ...
int ShardCommand(const Args& args);       // headrace shard MANIFEST --out DIR ...
int PlanCommand(const Args& args);        // headrace plan [PLAN.yaml] [--NAME VALUE ...]
int ReportCommand(const Args& args);      // headrace report REPORT.json --plot OUT
int MaterializeCommand(const Args& args);  // headrace materialize CONFIG --to URI ...
int DoctorCommand(const Args& args);      // headrace doctor CONFIG | --from-report PATH
int IndexCommand(const Args& args);       // headrace index sizes CONFIG [--out PATH]
int WhichCommand(const Args& args);       // headrace which CONFIG --step N --rank R | --sample ID

// Small argument helpers shared by the subcommands.
struct ArgReader {
  const Args& args;
  size_t i = 0;
  bool done() const { return i >= args.size(); }
  const std::string& peek() const { return args[i]; }
  // The value after flag `name` (consumes both); prints an error and returns false
  // when it is missing.
  bool Value(const std::string& name, std::string* out);
};

// Writes `text` to `path`, creating parent folders. Returns false (after printing why)
// on failure.
bool WriteTextFile(const std::string& path, const std::string& text);

// Reads `path`, a regular file of at most 16 MiB (a report, a plan). Returns false after
// printing "<command>: <flag> <path>: <why>".
bool ReadSmallFile(const char* command, const char* flag, const std::string& path,
                   std::string* out);

// Whether WriteTextFile(path, ...) can succeed, found before a run rather than after it:
// creates the parent folders and opens the file for writing without truncating it (a
// file that did not exist is removed again). Returns false after printing
// "<command>: <flag> <path>: cannot write: <why>".
bool CheckWritable(const char* command, const char* flag, const std::string& path);

// What UploadFiles did.
struct UploadStats {
  int64_t files = 0;
  int64_t failed = 0;
  int64_t bytes = 0;
};

// Puts every regular file under `dir` at `base` + its path relative to `dir` (`base`
// ends in '/'), up to `inflight` PUTs at once. A file that cannot be read or put is
// printed as "<command>: <why>" and counted in `failed`.
UploadStats UploadFiles(ObjectStore& store, const std::string& dir, const std::string& base,
                        int inflight, const char* command);

}  // namespace headrace::tools
