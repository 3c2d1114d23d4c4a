// `--set key.path=value` overrides: each sets a value in the YAML tree before it is read,
// creating maps (or a list, before an index) on the way; an op element is addressed by
// its name (ops[1].image.resize.shorter_side).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "headrace/core/strings.h"
#include "headrace/pipeline/config_reader.h"

namespace headrace::config_internal {
namespace {

// "ops[1].image.resize.shorter_side" -> ops, 1, image, resize, shorter_side.
Result<std::vector<std::string>> SplitKey(std::string_view key) {
  std::vector<std::string> tokens;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    std::string_view piece = key.substr(start, dot == std::string_view::npos ? dot : dot - start);
    // Peel "[n]" suffixes.
    const size_t bracket = piece.find('[');
    std::string_view name = piece.substr(0, bracket);
    if (!name.empty()) tokens.emplace_back(name);
    std::string_view rest = bracket == std::string_view::npos ? "" : piece.substr(bracket);
    while (!rest.empty()) {
      const size_t close = rest.find(']');
      if (rest.front() != '[' || close == std::string_view::npos ||
          !IsIndex(rest.substr(1, close - 1))) {
        return Status::InvalidArgument("bad index in " + Quote(piece));
      }
      tokens.emplace_back(rest.substr(1, close - 1));
      rest.remove_prefix(close + 1);
    }
    if (name.empty() && bracket != 0) return Status::InvalidArgument("empty key segment");
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return tokens;
}

std::string JoinPath(std::span<const std::string> tokens) {
  std::string out;
  for (const std::string& t : tokens) out = ChildPath(out, t);
  return out;
}

bool StartsWith(std::span<const std::string> tokens, const std::vector<std::string>& prefix) {
  if (tokens.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

// Sets `value` at `tokens` below `node` (whose path is `path`), creating maps (or a list,
// before an index) on the way. Errors are returned as bare reasons; the caller names the
// override.
Status SetIn(YAML::Node node, std::span<const std::string> tokens, const YAML::Node& value,
             const std::string& path) {
  const std::string& token = tokens[0];
  const bool last = tokens.size() == 1;
  const std::string here = ChildPath(path, token);
  if (!node.IsDefined() || node.IsNull() || node.IsMap()) {
    if (IsIndex(token) && node.IsDefined() && node.IsMap()) {
      return Status::InvalidArgument((path.empty() ? "the top level" : Quote(path)) +
                                     " is a map, not a list: no index " + token);
    }
    if (last) {
      node[token] = value;
      return Status::Ok();
    }
    YAML::Node child = node[token];
    if ((!child.IsDefined() || child.IsNull()) && IsIndex(tokens[1])) {
      child = YAML::Node(YAML::NodeType::Sequence);
    }
    return SetIn(child, tokens.subspan(1), value, here);
  }
  if (node.IsSequence()) {
    if (!IsIndex(token)) {
      return Status::InvalidArgument(Quote(path) + " is a list: expected an index, got " +
                                     Quote(token));
    }
    const size_t index = std::stoul(token);
    const size_t size = node.size();
    if (index > size || (index == size && !last)) {
      return Status::InvalidArgument(Quote(path) + " has " + std::to_string(size) +
                                     " items: no index " + token +
                                     (index == size ? " (set it whole to append)" : ""));
    }
    if (last) {
      if (index == size) {
        node.push_back(value);
      } else {
        YAML::Node element = node[index];
        element = value;
      }
      return Status::Ok();
    }
    YAML::Node element = node[index];
    // An op element, `name` or `{name: params}`, is addressed as N.name.param where the
    // name itself has dots.
    std::string name;
    if (element.IsScalar()) {
      name = element.Scalar();
    } else if (element.IsMap() && element.size() == 1 && element.begin()->first.IsScalar()) {
      name = element.begin()->first.Scalar();
    }
    if (!name.empty()) {
      HR_ASSIGN_OR_RETURN(std::vector<std::string> name_tokens, SplitKey(name));
      const auto rest = tokens.subspan(1);
      if (!StartsWith(rest, name_tokens)) {
        return Status::InvalidArgument(here + " is " + Quote(name) + ", not " +
                                       Quote(JoinPath(rest)));
      }
      if (element.IsScalar()) {
        YAML::Node as_map(YAML::NodeType::Map);
        as_map[name] = YAML::Node(YAML::NodeType::Null);
        element = as_map;
      }
      const auto params = rest.subspan(name_tokens.size());
      if (params.empty()) {
        element[name] = value;
        return Status::Ok();
      }
      return SetIn(element[name], params, value, here + "." + name);
    }
    return SetIn(element, tokens.subspan(1), value, here);
  }
  return Status::InvalidArgument(Quote(path) + " is a single value, not a map: cannot set " +
                                 Quote(token) + " in it");
}

// More parts than any key of the schema has (the deepest, ops.N.image.normalize.mean.0,
// has 6). SetIn recurses once per part: an unbounded key would overflow the stack.
constexpr size_t kMaxKeyParts = 32;

}  // namespace

Result<std::string> ApplyOverride(YAML::Node& root, const std::string& text) {
  const auto fail = [&](std::string_view why) {
    return Status::InvalidArgument("override " + Quote(text) + ": " + std::string(why));
  };
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return fail("expected key.path=value");
  const std::string_view key = TrimWhitespace(std::string_view(text).substr(0, eq));
  const std::string_view value_text = TrimWhitespace(std::string_view(text).substr(eq + 1));
  if (key.empty()) return fail("empty key");
  Result<std::vector<std::string>> tokens = SplitKey(key);
  if (!tokens.ok()) return fail(tokens.status().message());
  if (tokens->size() > kMaxKeyParts) {
    return Status::InvalidArgument("override " + Quote(key.substr(0, 64)) + "...: the key has " +
                                   std::to_string(tokens->size()) + " parts, at most " +
                                   std::to_string(kMaxKeyParts) + " are allowed");
  }

  YAML::Node value;
  if (value_text.empty()) {
    value = YAML::Node(std::string());
  } else {
    try {
      value = YAML::Load(std::string(value_text));
    } catch (const YAML::Exception& e) {
      return fail("value is not valid YAML: " + e.msg);
    }
  }
  if (!root.IsDefined() || root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  if (!root.IsMap()) return fail("the config is not a map");
  if (Status set = SetIn(root, *tokens, value, ""); !set.ok()) return fail(set.message());
  return JoinPath(*tokens);
}

}  // namespace headrace::config_internal
