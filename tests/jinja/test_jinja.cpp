// ft::jinja unit tests: API behaviour, parse-time rejection of unsupported constructs, limits. The comparison
// with Python jinja2 / transformers lives in test_jinja_reference.cpp.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "jinja/template.h"

namespace {

using ft::jinja::RenderOptions;
using ft::jinja::Template;
using ft::jinja::Value;

std::string config_error_of(const std::string& source, const std::string& name = "chat_template") {
  try {
    Template t(source, name);
  } catch (const ft::ConfigError& e) {
    EXPECT_FALSE(e.hint().empty());
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for: " << source;
  return "";
}

std::string render_error_of(const std::string& source, const Value& ctx = Value::object(),
                            const RenderOptions& opts = {}) {
  Template t(source);
  try {
    t.render(ctx, opts);
  } catch (const ft::jinja::TemplateRaised&) {
    ADD_FAILURE() << "unexpected TemplateRaised";
  } catch (const ft::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ft::Error for: " << source;
  return "";
}

TEST(JinjaTemplate, RendersContextVariablesAndPythonStyleValues) {
  Template t("{{ name }} {{ n }} {{ f }} {{ b }} {{ z }} {{ l }}");
  Value ctx = {{"name", "x"}, {"n", 1}, {"f", 1.0}, {"b", true}, {"z", nullptr}, {"l", {1, "a"}}};
  EXPECT_EQ(t.render(ctx).text, "x 1 1.0 True None [1, 'a']");
}

TEST(JinjaTemplate, RejectsUnsupportedFilterWithLineAndColumn) {
  EXPECT_EQ(config_error_of("line1\n  {{ x|batch(2) }}", "tok"), "tok:2:8: unsupported filter 'batch'");
}

TEST(JinjaTemplate, RejectsUnsupportedTagsTestsMethodsAndGlobals) {
  EXPECT_NE(config_error_of("{% include 'x.jinja' %}").find("chat_template:1:4: unsupported tag 'include'"),
            std::string::npos);
  EXPECT_NE(config_error_of("{% extends 'base' %}").find("unsupported tag 'extends'"), std::string::npos);
  EXPECT_NE(config_error_of("{{ x is prime }}").find("1:9: unsupported test 'prime'"), std::string::npos);
  EXPECT_NE(config_error_of("{{ x.expandtabs() }}").find("unsupported method 'expandtabs()'"), std::string::npos);
  EXPECT_NE(config_error_of("{{ x.append(1) }}").find("unsupported method 'append()'"), std::string::npos);
  EXPECT_NE(config_error_of("{% for x in y recursive %}{% endfor %}").find("recursive"), std::string::npos);
  EXPECT_NE(config_error_of("{{ cycler(1, 2) }}").find("unsupported global 'cycler'"), std::string::npos);
  EXPECT_NE(config_error_of("{{ f(*args) }}").find("*args"), std::string::npos);
  EXPECT_NE(config_error_of("{% frobnicate %}").find("unknown tag 'frobnicate'"), std::string::npos);
}

TEST(JinjaTemplate, ReportsSyntaxErrorsWithPosition) {
  EXPECT_NE(config_error_of("{% if x %}never closed").find("1:4: unexpected end of template"), std::string::npos);
  EXPECT_NE(config_error_of("a\n{{ (1 }}").find("2:"), std::string::npos);
  EXPECT_NE(config_error_of("{{ 'unterminated }}").find("1:4:"), std::string::npos);
  EXPECT_NE(config_error_of("{# no end").find("Missing end of comment tag"), std::string::npos);
  EXPECT_NE(config_error_of("{% break %}").find("'break' outside of a loop"), std::string::npos);
  EXPECT_NE(config_error_of("{{ 007 }}").find("1:6:"), std::string::npos);
}

TEST(JinjaTemplate, RaiseExceptionThrowsTemplateRaisedWithTheTemplatesMessage) {
  Template t("{% if messages|length > 1 %}{{ raise_exception('Roles must alternate: ' ~ messages[1]) }}{% endif %}");
  try {
    t.render({{"messages", {"a", "b"}}});
    FAIL() << "no exception";
  } catch (const ft::jinja::TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate: b");
    const ft::Error& base = e;
    EXPECT_EQ(base.code(), ft::ExitCode::kFailure);
  }
  EXPECT_EQ(t.render({{"messages", {"a"}}}).text, "");
}

TEST(JinjaTemplate, RuntimeErrorsNameTheTemplateLine) {
  EXPECT_NE(render_error_of("ok\n{{ foo.bar }}").find("chat_template:2: 'foo' is undefined"), std::string::npos);
  EXPECT_NE(render_error_of("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(render_error_of("{{ x|tojson }}").find("not JSON serializable"), std::string::npos);
  EXPECT_NE(render_error_of("{% set ns = namespace() %}{% set ns._x = 1 %}").find("underscore"), std::string::npos);
}

TEST(JinjaTemplate, RecursionDepthIsBounded) {
  std::string err = render_error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(err.find("maximum recursion depth exceeded"), std::string::npos) << err;
}

TEST(JinjaTemplate, OutputSizeIsBounded) {
  RenderOptions opts;
  opts.max_output_bytes = 1 << 20;
  std::string err = render_error_of("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", Value::object(), opts);
  EXPECT_NE(err.find("output exceeded 1048576 bytes"), std::string::npos) << err;
}

// Found by tests/fuzz/fuzz_jinja: padding, indentation and repetition sized by the template allocated (or looped)
// before the output limit was checked; now each is refused first, naming the limit.
TEST(JinjaTemplate, HugePaddingIndentAndRepetitionAreRefusedBeforeAllocating) {
  RenderOptions opts;
  opts.max_output_bytes = 1 << 20;
  for (const char* source : {"{{ '%9999999999s' % 'x' }}", "{{ 'a' | center(9999999999) }}",
                             "{{ 'x' | indent(9999999999) }}", "{{ [1] | tojson(indent=999999999) }}",
                             "{{ 'x'.zfill(9999999999) }}", "{{ 'x'.ljust(4611686018427387904, 'ab') }}",
                             "{{ 'ab' * 4611686018427387904 }}", "{{ [1, 2] * 9223372036854775807 }}",
                             "{{ ('x\n' * 1000) | indent(2000) }}"}) {
    const std::string err = render_error_of(source, Value::object(), opts);
    EXPECT_NE(err.find("exceeds the template output limit of 1048576 bytes"), std::string::npos) << source << ": " << err;
  }
  EXPECT_EQ(Template("{{ '' * 9223372036854775807 }}|{{ [] * 9223372036854775807 }}").render(Value::object()).text,
            "|[]");
}

// Found by tests/fuzz/fuzz_jinja (LeakSanitizer): a namespace holding itself was a shared_ptr cycle that outlived the
// render. It renders as in Python; the fuzz seeds carry this template, so the fuzz smoke checks it for leaks.
TEST(JinjaTemplate, NamespaceThatHoldsItselfRendersAsInPython) {
  EXPECT_EQ(Template("{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns.me.me.n }}").render(Value::object()).text,
            "1");
}

// Found by tests/fuzz/fuzz_jinja (ASan): a NUL byte after '%' reached snprintf's format string; number widths and
// precisions beyond the formatting buffer are refused instead of cut.
TEST(JinjaTemplate, PercentFormatRefusesNulBytesAndHugeNumberWidths) {
  const Value ctx = {{"f", std::string("%\0.2f", 5)}};
  EXPECT_NE(render_error_of("{{ f % 1.5 }}", ctx).find("unsupported format character"), std::string::npos);
  EXPECT_NE(render_error_of("{{ '%.999999f' % 1.5 }}").find("precision over 100"), std::string::npos);
  EXPECT_NE(render_error_of("{{ '%9999d' % 1 }}").find("width over 400"), std::string::npos);
  EXPECT_EQ(Template("{{ '%8.3f|%-5d|%x|%05.1f' % (3.14159, 42, 255, 2.25) }}").render(Value::object()).text,
            "   3.142|42   |ff|002.2");
}

// Found by tests/fuzz/fuzz_jinja (ASan stack overflows): printing a namespace that holds itself recursed forever,
// and a list nested 100,000 deep overflowed the stack when it was freed. A namespace met again prints as {...}, as
// Python's repr does, and values nest at most 256 deep, also when they come from the context's JSON.
TEST(JinjaTemplate, SelfHoldingNamespacesPrintAsInPythonAndDeepNestingIsRefused) {
  EXPECT_EQ(Template("{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns }}").render(Value::object()).text,
            "<Namespace {'n': 1, 'me': <Namespace {...}>}>");
  EXPECT_NE(render_error_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
                            "{% endfor %}")
                .find("nested more than 256 levels"),
            std::string::npos);
  Value deep = 1;
  for (int i = 0; i < 300; ++i) deep = Value::array({deep});
  EXPECT_NE(render_error_of("{{ x }}", Value{{"x", deep}}).find("nested more than 256 levels"), std::string::npos);
  EXPECT_EQ(Template("{{ [[[1]]] }}").render(Value::object()).text, "[[[1]]]");
}

TEST(JinjaTemplate, StepsAreBoundedForRunawayLoops) {
  RenderOptions opts;
  opts.max_steps = 100000;
  std::string err = render_error_of(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", Value::object(), opts);
  EXPECT_NE(err.find("steps"), std::string::npos) << err;
  EXPECT_NE(render_error_of("{{ range(100001)|list }}").find("MAX_RANGE"), std::string::npos);
}

TEST(JinjaTemplate, GenerationSpansAreUtf8ByteRangesInOrder) {
  Template t("é{% for m in msgs %}[{% generation %}{{ m }}{% endgeneration %}]{% endfor %}{% generation %}{% endgeneration %}");
  auto r = t.render({{"msgs", {"ü", "ab"}}});
  EXPECT_EQ(r.text, "é[ü][ab]");
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(r.generation_spans, (Spans{{3, 5}, {7, 9}, {10, 10}}));
  for (auto [b, e] : r.generation_spans) EXPECT_LE(e, r.text.size()) << b;
}

TEST(JinjaTemplate, SetInsideGenerationDoesNotLeakLikeJinjasCallerMacro) {
  Template t("{% set x = 1 %}{% generation %}{% set x = 2 %}{{ x }}{% endgeneration %}{{ x }}");
  EXPECT_EQ(t.render(Value::object()).text, "21");
}

TEST(JinjaTemplate, StrftimeNowUsesTheInjectedClock) {
  Template t("{{ strftime_now('%Y-%m-%d') }}");
  RenderOptions opts;
  opts.now = 86400 * 365;  // 1971-01-01 UTC (checked loosely: the local zone may shift it a day)
  std::string day = t.render(Value::object(), opts).text;
  EXPECT_TRUE(day == "1971-01-01" || day == "1970-12-31") << day;
}

TEST(JinjaTemplate, RejectsNonObjectContext) {
  Template t("x");
  EXPECT_THROW(t.render(Value::array()), ft::ConfigError);
}

TEST(JinjaTemplate, IsMovableAndRendersConcurrently) {
  Template a("{% for m in messages %}{{ m.content }}{% endfor %}");
  Template t = std::move(a);
  Value ctx = {{"messages", {{{"content", "a"}}, {{"content", "b"}}}}};
  std::string r1, r2;
  std::thread th([&] {
    for (int i = 0; i < 200; ++i) r1 = t.render(ctx).text;
  });
  for (int i = 0; i < 200; ++i) r2 = t.render(ctx).text;
  th.join();
  EXPECT_EQ(r1, "ab");
  EXPECT_EQ(r2, "ab");
}

TEST(JinjaChatContext, DropsNullKeysAliasesReasoningAndDefinesToolsAndDocuments) {
  Value msgs = Value::parse(R"([{"role": "user", "content": "q", "tool_calls": null},
                                {"role": "assistant", "content": "a", "reasoning": "why"}])");
  Value ctx = ft::jinja::make_chat_context(msgs, nullptr, nullptr, true, {{"bos_token", "<s>"}});
  EXPECT_FALSE(ctx["messages"][0].contains("tool_calls"));
  EXPECT_EQ(ctx["messages"][1].dump(),
            R"({"thinking":"why","role":"assistant","content":"a","reasoning":"why","reasoning_content":"why"})");
  EXPECT_TRUE(ctx["tools"].is_null());
  EXPECT_TRUE(ctx.contains("documents"));
  EXPECT_EQ(ctx["add_generation_prompt"], true);
  EXPECT_EQ(ctx["bos_token"], "<s>");
  Template t("{{ tools is defined }} {{ tools is none }}");
  EXPECT_EQ(t.render(ctx).text, "True True");
}

TEST(JinjaJson, PythonJsonDumpsMatchesPythonFormatting) {
  Value v = Value::parse(R"({"b": [1, 2.0, 1e-7, "é\n\"", true, null], "a": {}})");
  EXPECT_EQ(ft::jinja::python_json_dumps(v), R"({"b": [1, 2.0, 1e-07, "é\n\"", true, null], "a": {}})");
  EXPECT_EQ(ft::jinja::python_json_dumps(v, 2, true),
            "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2.0,\n    1e-07,\n    \"é\\n\\\"\",\n    true,\n    null\n  ]\n}");
}

}  // namespace
