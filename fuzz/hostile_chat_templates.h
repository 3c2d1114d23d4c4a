// Chat templates that crashed the process or took unbounded memory or time before
// ChatTemplateLimits (issue 26), each with the part of the error it now gets. Shared by
// the op's tests (src/headrace/ops/text/chat_template_test.cc) and the chat_template fuzz
// seeds (make_seeds.cc), so each stays both a regression test and a starting point.
#pragma once

#include <string>
#include <vector>

namespace headrace {

struct HostileTemplate {
  std::string name;
  std::string source;
  std::string expect;    // a part of the error message
  bool renders = true;   // false: refused when parsing, before any render
  // What it did before the limits (for the record; the tests check `expect`).
  std::string before;
};

inline const std::vector<HostileTemplate>& HostileChatTemplates() {
  static const std::vector<HostileTemplate> templates = [] {
    const auto repeat = [](const std::string& s, int n) {
      std::string out;
      for (int i = 0; i < n; ++i) out += s;
      return out;
    };
    std::vector<HostileTemplate> t = {
        {"int_floordiv_zero", "{{ 1 // 0 }}", "division or modulo by zero", true, "SIGFPE"},
        {"int_mod_zero", "{{ 7 % 0 }}", "division or modulo by zero", true, "SIGFPE"},
        {"int_div_zero", "{{ 1 / 0 }}", "division or modulo by zero", true, "SIGFPE"},
        {"float_div_zero", "{{ 1.5 / 0 }}", "float division by zero", true, "inf, not an error"},
        {"int_min_floordiv_minus_one", "{{ (-9223372036854775807 - 1) // -1 }}",
         "integer overflow", true, "SIGFPE"},
        {"int_max_plus_one", "{{ 9223372036854775807 + 1 }}", "integer overflow", true,
         "signed overflow (UB)"},
        {"int_mul_overflow", "{{ 4611686018427387904 * 4 }}", "integer overflow", true,
         "signed overflow (UB)"},
        {"macro_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
         "nests deeper", true, "SIGSEGV (stack overflow)"},
        {"nested_parentheses", "{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}",
         "nests deeper", false, "SIGSEGV after 90 s"},
        {"nested_ifs", repeat("{% if true %}", 20000) + "x" + repeat("{% endif %}", 20000),
         "nests deeper", false, "past 120 s"},
        {"nested_lists", "{{ " + repeat("[", 50000) + repeat("]", 50000) + " }}", "nests deeper",
         false, "SIGSEGV"},
        {"nested_nots", "{{ " + repeat("not ", 50000) + "true }}", "nests deeper", false,
         "SIGSEGV"},
        {"range_1e9", "{% for i in range(10**9) %}{% endfor %}", "range would make a value",
         true, "RSS past 8 GiB"},
        {"list_doubled",
         "{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = ns.x + ns.x %}"
         "{% endfor %}{{ ns.x|length }}",
         "makes more than", true, "RSS past 8 GiB"},
        {"indent_1e9", "{{ 'a\nb' | indent(1000000000) }}", "indent would make a value", true,
         "RSS past 8 GiB"},
        {"string_times_1e10", "{{ 'x' * 10000000000 }}", "string * would make a value", true,
         "10 GB"},
        {"replace_empty", "{{ ('x' * 100000).replace('', 'y' * 100000) }}",
         "replace would make a value", true, "10 GB, quadratic"},
        {"replace_grows",
         "{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
         "{% set ns.s = ns.s.replace('a', ns.s) %}{% endfor %}{{ ns.s|length }}",
         "value", true, "unbounded memory"},
        {"tojson_indent", "{{ [[[1, 2], [3]], {'a': [4]}] | tojson(indent=1000000000) }}",
         "would make a value", true, "GBs of spaces"},
        {"join_grows",
         "{% set ns = namespace(x=['y' * 100000]) %}{% for i in range(30) %}"
         "{% set ns.x = [ns.x|join('-'), ns.x|join('+')] %}{% endfor %}",
         "value", true, "unbounded memory"},
        {"split_empty", "{{ 'abc'.split('') }}", "empty separator", true,
         "never ends, memory unbounded"},
        {"range_step_zero", "{{ range(10, 0, 0) }}", "must not be zero", true,
         "never ends, memory unbounded"},
        {"loops_1e9",
         "{% set r = range(1000) %}{% for i in r %}{% for j in r %}{% for k in r %}"
         "{% endfor %}{% endfor %}{% endfor %}",
         "steps", true, "10^9 iterations, ~20 min"},
        {"list_contains_itself", "{% set x = [] %}{% set _ = x.append(x) %}{{ x }}",
         "contain itself", true, "SIGSEGV (infinite dump)"},
        {"namespace_contains_itself",
         "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}", "contain itself", true,
         "SIGSEGV (infinite dump)"},
        {"deep_value",
         "{% set ns = namespace(x=[]) %}{% set r = range(1000) %}{% for i in r %}{% for j in r %}"
         "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}{{ ns.x }}",
         "the template makes", true, "SIGSEGV (deep dump)"},
        {"range_four_arguments", "{{ range(1, 2, 3, 4) }}", "at most 3 arguments", true,
         "heap overflow (found by the chat_template fuzz target)"},
        {"cycle_kept_past_its_loop",
         "{% set ns = namespace(c=none) %}{% for x in [1, 2] %}{% set ns.c = loop.cycle %}"
         "{% endfor %}{{ ns.c('a', 'b') }}{{ raise_exception('cycle ok') }}",
         "cycle ok", true, "stack-use-after-return (ASan)"},
        {"cycle_with_fewer_arguments",
         "{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b', 'c') }}{{ loop.cycle('d') }}{% endfor %}"
         "{{ raise_exception('cycle ok') }}",
         "cycle ok", true, "heap-buffer-overflow (ASan)"},
        {"recursive_loop_kept_past_its_loop",
         "{% set ns = namespace(l=none) %}{% for x in [[1]] recursive %}{% set ns.l = loop %}"
         "{% endfor %}{{ ns.l([[2]]) }}",
         "after its loop ended", true, "SIGSEGV (a dead stack frame)"},
        {"loop_over_a_long_string",
         "{% set s = 'x' * 1000000 %}{% for c in s %}{% endfor %}{% for c in s %}{% endfor %}",
         "steps", true, "a value per character before the body ran (5 GB at 64 MiB)"},
        {"output_1gb",
         "{% set r = range(1000) %}{% for i in r %}{% for j in r %}{{ 'x' * 1000 }}{% endfor %}"
         "{% endfor %}",
         "", true,
         "1 GB of output"},
    };
    return t;
  }();
  return templates;
}

}  // namespace headrace
