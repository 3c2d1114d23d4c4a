// Reading a config: the Reader's non-template half, the op list, and the entry points of
// config.h that parse (ParsePipelineConfig, LoadPipelineConfig, ParseOpConfig).
#include "headrace/pipeline/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "headrace/pipeline/config_reader.h"

namespace headrace {
namespace config_internal {
namespace {

// Whether `a` is `b`, or one is the other plus ".x" / "[n]".
bool PathsOverlap(std::string_view a, std::string_view b) {
  if (a.size() > b.size()) std::swap(a, b);
  if (b.substr(0, a.size()) != a) return false;
  return b.size() == a.size() || b[a.size()] == '.' || b[a.size()] == '[';
}

// "image.decode, image.resize, ...": every op, in the variant's order.
template <size_t... I>
std::string OpNamesOf(std::index_sequence<I...>) {
  std::string out;
  ((out += (I == 0 ? "" : ", "), out += OpTypeOf<std::variant_alternative_t<I, OpSpec>>::kName),
   ...);
  return out;
}

}  // namespace

std::string Describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing (null)";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return Quote(n.Scalar());
}

const std::string& AllOpNames() {
  // Without UserOpSpec, the last alternative: it cannot be written in a config.
  static_assert(std::is_same_v<std::variant_alternative_t<std::variant_size_v<OpSpec> - 1, OpSpec>,
                               UserOpSpec>);
  static const std::string names =
      OpNamesOf(std::make_index_sequence<std::variant_size_v<OpSpec> - 1>{});
  return names;
}

std::string Reader::Where(const std::string& key) const {
  const auto alias = aliases_.find(key);
  const std::string& path = alias == aliases_.end() ? key : alias->second;
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (PathsOverlap(it->first, path)) return " (set by override " + Quote(it->second) + ")";
  }
  std::string p = path;
  while (!p.empty()) {
    if (auto it = lines_.find(p); it != lines_.end()) {
      return " (line " + std::to_string(it->second) + ")";
    }
    const size_t cut = p.find_last_of(".[");
    p.resize(cut == std::string::npos ? 0 : cut);
  }
  return "";
}

Status Reader::Error(const std::string& path, std::string_view what) const {
  return Status::InvalidArgument((path.empty() ? std::string("config") : path) + ": " +
                                 std::string(what) + Where(path));
}

void Reader::Note(const std::string& path, const YAML::Node& node) {
  if (!node.IsDefined()) return;
  const YAML::Mark mark = node.Mark();
  if (!mark.is_null()) lines_.emplace(path, mark.line + 1);
}

Status Reader::CheckMap(const YAML::Node& node, const std::string& path,
                        const std::vector<std::string_view>& allowed, std::string_view owner) {
  Note(path, node);
  if (!node.IsDefined() || node.IsNull()) return Status::Ok();
  std::string allowed_text;
  for (std::string_view k : allowed) {
    if (!allowed_text.empty()) allowed_text += ", ";
    allowed_text += k;
  }
  if (!node.IsMap()) {
    return Error(path, "expected a map with keys " + allowed_text + "; got " + Describe(node));
  }
  std::vector<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      return Error(path, "map keys must be names, got " + Describe(kv.first));
    }
    const std::string& key = kv.first.Scalar();
    const std::string key_path = ChildPath(path, key);
    Note(key_path, kv.first);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string where = owner.empty() ? std::string() : " for " + std::string(owner);
      return Error(key_path, "unknown key (allowed" + where + ": " + allowed_text + ")");
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return Error(key_path, "duplicate key");
    }
    seen.push_back(key);
  }
  return Status::Ok();
}

Status Reader::ParseOps(const YAML::Node& n, const std::string& path, std::vector<OpSpec>* out) {
  out->clear();
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) {
    return Error(path, "expected a list of ops (- op.name: {params}), got " + Describe(n));
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node element = n[i];
    const std::string element_path = ChildPath(path, std::to_string(i));
    Note(element_path, element);
    std::string name;
    YAML::Node params;
    if (element.IsScalar()) {
      name = element.Scalar();
    } else if (element.IsMap() && element.size() == 1) {
      const auto kv = *element.begin();
      if (!kv.first.IsScalar()) return Error(element_path, "expected an op name as key");
      name = kv.first.Scalar();
      params.reset(kv.second);
    } else {
      return Error(element_path,
                   "expected one op: `- op.name` or `- op.name: {params}` (a map with one "
                   "key), got " +
                       (element.IsMap() ? "a map with " + std::to_string(element.size()) + " keys"
                                        : Describe(element)));
    }
    OpSpec op;
    HR_RETURN_IF_ERROR(ParseOp(name, params, element_path, &op));
    out->push_back(std::move(op));
  }
  return Status::Ok();
}

}  // namespace config_internal

using config_internal::ApplyOverride;
using config_internal::ChildPath;
using config_internal::Reader;

namespace {

// Where each document of a YAML stream starts, as yaml-cpp's parser walks it, without
// building them. yaml-cpp 0.7's LoadAll (Debian 12's) loops forever, allocating, on some
// malformed text (a ',' where a node starts: each pass yields another null document
// without reading on; fixed upstream in 0.8, jbeder/yaml-cpp#1319): the config fuzz
// target found an 11-byte file that did it. A document that starts where the one before
// it did is that loop, and a syntax error here.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;  // each document's start
  std::vector<YAML::Mark> roots;  // and its root node's (as Node::Mark gives it)
  void OnDocumentStart(const YAML::Mark& mark) override {
    marks.push_back(mark);
    roots.push_back(mark);
    at_root_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark) {
    if (at_root_) roots.back() = mark;
    at_root_ = false;
  }
  bool at_root_ = false;
};

// The one YAML document of `text` (null when there is none). yaml-cpp's Load reads the
// first document and drops the rest without a word; a second one is refused instead,
// since the run would not be the one the file seems to describe. Throws
// YAML::ParserException on a syntax error, as Load does.
Result<YAML::Node> LoadOneDocument(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    const size_t n = starts.marks.size();
    if (n >= 2 && starts.marks[n - 1].pos <= starts.marks[n - 2].pos) {
      throw YAML::ParserException(starts.marks[n - 1], "no YAML node can start here");
    }
  }
  if (starts.marks.size() > 1) {
    return Status::InvalidArgument(
        "the YAML holds " + std::to_string(starts.marks.size()) +
        " documents (a second one at line " + std::to_string(starts.roots[1].line + 1) +
        "); a config is one document: remove the '---' that starts the next one");
  }
  return YAML::Load(text);
}

}  // namespace

Result<PipelineSpec> ParsePipelineConfig(std::string_view yaml_text,
                                         const std::vector<std::string>& overrides) {
  // yaml-cpp reports through exceptions; they stop here.
  try {
    Result<YAML::Node> loaded = Status::Internal("not parsed");
    try {
      loaded = LoadOneDocument(std::string(yaml_text));
    } catch (const YAML::ParserException& e) {
      return Status::InvalidArgument("YAML syntax error at line " +
                                     std::to_string(e.mark.line + 1) + ", column " +
                                     std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
    HR_ASSIGN_OR_RETURN(YAML::Node root, std::move(loaded));
    Reader reader;
    for (const std::string& o : overrides) {
      HR_ASSIGN_OR_RETURN(std::string key, ApplyOverride(root, o));
      reader.AddOverride(std::move(key), o);
    }
    if (const YAML::Node& r = root; r.IsMap() && r["batch_ops"].IsDefined()) {
      return Status::InvalidArgument(
          "batch_ops: batch ops are code: add them from Python (headrace.ops.map_batch) or "
          "C++ (PipelineSpec::batch_ops), not from a config");
    }
    PipelineSpec spec;
    HR_RETURN_IF_ERROR(reader.ParseStruct(root, "", "", &spec));
    for (size_t i = 0; i < spec.source.mix.size(); ++i) {
      const auto ops = reader.mix_ops().find(ChildPath("source.mix", std::to_string(i)));
      if (ops == reader.mix_ops().end()) continue;
      spec.mix_ops.resize(i + 1);
      spec.mix_ops[i] = ops->second;
    }
    if (Status valid = ValidatePipelineSpec(spec); !valid.ok()) {
      // Validation names the key first ("batch.size: ..."); add where it was set.
      const std::string& m = valid.message();
      return Status::InvalidArgument(m + reader.Where(m.substr(0, m.find(": "))));
    }
    return spec;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("config: ") + e.what());
  }
}

Result<PipelineSpec> LoadPipelineConfig(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return Status::NotFound("no such config file: " + path);
    return Status::IoError("cannot open config " + path + ": " + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IoError("cannot stat config " + path + ": " + std::strerror(errno));
  }
  // A directory, FIFO or device (/dev/zero: endless) is a wrong path, like a missing file.
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                                              : "not a regular file";
    return Status::InvalidArgument("config " + path + " is " + what +
                                   "; expected a regular YAML file");
  }
  const auto too_large = [&] {
    return Status::InvalidArgument("config " + path + " is larger than " +
                                   std::to_string(kMaxConfigBytes >> 20) +
                                   " MiB; expected a YAML pipeline config");
  };
  if (st.st_size > kMaxConfigBytes) return too_large();
  // Read at most one byte past the limit: the file may grow while we read it.
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("cannot read config " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > kMaxConfigBytes) return too_large();
  }
  Result<PipelineSpec> spec = ParsePipelineConfig(text, overrides);
  if (!spec.ok()) return spec.status().WithContext(path);
  return spec;
}

Result<OpSpec> ParseOpConfig(std::string_view name, std::string_view params_yaml) {
  try {
    Result<YAML::Node> loaded = Status::Internal("not parsed");
    try {
      loaded = LoadOneDocument(std::string(params_yaml));
    } catch (const YAML::ParserException& e) {
      return Status::InvalidArgument(std::string(name) + ": YAML syntax error: " + e.msg);
    }
    if (!loaded.ok()) return Status::InvalidArgument(std::string(name) + ": " + loaded.status().message());
    YAML::Node params = *std::move(loaded);
    Reader reader;
    OpSpec op;
    HR_RETURN_IF_ERROR(reader.ParseOp(name, params, "", &op));
    return op;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string(name) + ": " + e.what());
  }
}

}  // namespace headrace
