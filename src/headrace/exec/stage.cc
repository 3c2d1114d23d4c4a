#include "headrace/exec/stage.h"

namespace headrace {

std::string_view StageName(StageKind kind) {
  switch (kind) {
    case StageKind::kRead:
      return "read";
    case StageKind::kChain:
      return "cpu";
    case StageKind::kAssemble:
      return "batch";
  }
  return "?";
}

std::string_view StageClass(StageKind kind) {
  switch (kind) {
    case StageKind::kRead:
      return "io";
    case StageKind::kChain:
      return "cpu";
    case StageKind::kAssemble:
      return "assembly";
  }
  return "?";
}

StageMetrics StageMetrics::Of(StageKind kind, int concurrency) {
  StageMetrics m;
  m.name = std::string(StageName(kind));
  m.kind = std::string(StageClass(kind));
  m.concurrency = concurrency;
  return m;
}

}  // namespace headrace
