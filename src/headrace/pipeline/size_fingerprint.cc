// SizeFingerprint (prepared.h): what a size index (exec/size_index.h) was built for.
#include <fstream>
#include <iterator>
#include <string>
#include <variant>

#include "headrace/io/sigv4.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/prepared.h"

namespace headrace {
namespace {

// The digest of a local file's bytes; a remote or unreadable file counts by its name
// alone (the config's text, in the fingerprint already).
std::string FileDigest(const std::string& path) {
  if (path.empty() || path.find("://") != std::string::npos) return "";
  std::ifstream file(path, std::ios::binary);
  if (!file.is_open()) return "unreadable";
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return Sha256Hex(bytes);
}

}  // namespace

std::string SizeFingerprint(const PipelineSpec& spec) {
  // Only what sizes depend on: the samples (the source) and what the chain makes of them.
  PipelineSpec sizes;
  sizes.source = spec.source;
  sizes.ops = spec.ops;
  sizes.batch.pack.field = spec.batch.pack.field;
  std::string text = PipelineSpecToYaml(sizes);
  for (const OpSpec& op : spec.ops) {
    if (const auto* t = std::get_if<TokenizeSpec>(&op); t != nullptr) {
      for (const std::string* file : {&t->model, &t->tokenizer, &t->tokenizer_config}) {
        text += "\n" + *file + " " + FileDigest(*file);
      }
    }
  }
  return Sha256Hex(text).substr(0, 16);
}

}  // namespace headrace
