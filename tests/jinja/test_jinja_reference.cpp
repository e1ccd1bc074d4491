// ft::jinja against the reference: Python jinja2 configured exactly as transformers configures it
// (tests/jinja/ref/render_ref.py). Every case is rendered by both; text, generation spans and raise_exception
// messages must be identical, and where Python fails we must fail too. Suites are named Python* (label integration).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "jinja/template.h"

namespace {

using ft::jinja::Template;
using ft::jinja::Value;

constexpr std::time_t kNow = 1721995200;  // 2024-07-26 12:00:00 UTC

struct Case {
  std::string id;
  Value spec;  // as sent to render_ref.py
};

std::string python() {
  const char* env = std::getenv("FT_PYTHON");
  return env && *env ? env : FT_TEST_PYTHON;
}
std::string source_dir() {
  const char* env = std::getenv("FT_SOURCE_DIR");
  return env && *env ? env : FT_TEST_SOURCE_DIR;
}
std::string script() { return source_dir() + "/tests/jinja/ref/render_ref.py"; }

bool have_python() {
  static const bool ok = [] {
    std::string cmd = "\"" + python() + "\" -c 'import jinja2, transformers' >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }();
  return ok;
}

std::string temp_path(const std::string& stem) {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/ft_jinja_" + stem + "_" + std::to_string(::getpid()) + ".json";
}

Value run_python(const std::vector<std::string>& args) {
  std::string out = temp_path("out");
  std::string cmd = "TZ=UTC \"" + python() + "\" \"" + script() + "\"";
  for (const auto& a : args) cmd += " \"" + a + "\"";
  cmd += " \"" + out + "\" 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference script failed: " + cmd);
  std::ifstream in(out);
  Value v = Value::parse(in);
  std::remove(out.c_str());
  return v;
}

// ------------------------------------------------------------------------------------------------ case tables

std::vector<Case>& all_cases() {
  static std::vector<Case> cases;
  return cases;
}

void add_raw(const std::string& group, const std::string& tmpl, const Value& context = Value::object()) {
  Case c;
  c.id = group + "#" + std::to_string(all_cases().size());
  c.spec = {{"id", c.id}, {"template", tmpl}, {"mode", "raw"}, {"context", context}, {"now", kNow}};
  all_cases().push_back(std::move(c));
}

void add_chat(const std::string& group, const std::string& tmpl, const Value& conv, bool agp,
              const Value& extra = Value::object()) {
  Case c;
  c.id = group + "#" + std::to_string(all_cases().size());
  c.spec = {{"id", c.id},        {"template", tmpl},   {"mode", "chat"},        {"messages", conv.at("messages")},
            {"tools", conv.value("tools", Value())}, {"documents", conv.value("documents", Value())},
            {"add_generation_prompt", agp}, {"extra", extra}, {"now", kNow}};
  all_cases().push_back(std::move(c));
}

// Expressions, filters, tests, methods, scoping: small templates in raw mode.
void expression_cases() {
  const std::string g = "expr";
  Value ctx = Value::parse(R"({
    "s": "  Hello, World!  ", "u": "héllo wörld ÉTÉ 中文 😀", "n": 7, "neg": -7, "f": 2.5, "z": 0, "t": true,
    "none": null, "l": [3, 1, 2], "e": [], "d": {"b": 1, "a": 2, "items": "key named items"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
             {"role": "user", "content": ["a", "b"]}],
    "nested": {"a": {"b": [10, 20, {"c": "deep"}]}}, "big": 12345678901234, "fl": [0.1, 1e20, 1.5e-7, 100.0, -0.0],
    "words": ["b", "A", "a", "C"], "mixed": {"k": [1, "two", null, true, 1.5, {"z": []}]},
    "json_s": "quote\" backslash\\ nl\n tab\t ctrl\u0001 uni é 😀 <html>&'"
  })");
  const char* templates[] = {
      // printing of values like Python's str()
      "{{ n }}|{{ f }}|{{ t }}|{{ none }}|{{ l }}|{{ d }}|{{ e }}|{{ mixed }}|{{ fl }}|{{ big }}",
      "{{ 1.0 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 10 / 5 }} {{ 1e16 }} {{ 123456789.125 }}",
      "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}",
      "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ n * 2.0 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }} {{ 'a' + 'b' }}",
      "{{ -n }} {{ +n }} {{ -f }} {{ not n }} {{ not none }} {{ n > 3 and f < 3 }} {{ z or 'dflt' }} {{ n and 'x' }}",
      "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }}",
      "{{ 'ell' in 'hello' }} {{ 2 in l }} {{ 'a' in d }} {{ 'zz' not in d }} {{ 5 in l }} {{ 'x' in undefined_thing }}",
      "{{ 'a' ~ 1 ~ 1.5 ~ none ~ true ~ undefined_thing ~ [1] }}",
      "{{ 'yes' if n > 3 else 'no' }}|{{ 'yes' if z }}|{{ 'a' if z else 'b' if n else 'c' }}",
      "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5] }} {{ l[-10:10] }}",
      "{{ u[0] }} {{ u[-1] }} {{ u[1:4] }} {{ u[::-1] }} {{ u|length }} {{ s[2:7] }} {{ 'abc'[10:] }}",
      "{{ nested.a.b[2].c }} {{ nested['a']['b'][0] }} {{ nested.a.b.1 }} {{ msgs[2].tool_calls[0].function.arguments }}",
      "{{ d.items is callable }}{{ d['items'] }}|{{ d.get('a') }} {{ d.get('q') }} {{ d.get('q', 5) }} {{ d.keys() | list }}",
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{{ d.values()|list }}",
      "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ '--x--'.strip('-') }}|{{ 'xxhixx'.lstrip('x') }}",
      "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
      "{{ '  a  b '.split(None, 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }} {{ 'x</think>y'.split('</think>')[-1] }}",
      "{{ s.startswith('  He') }} {{ s.endswith('!') }} {{ 'abc'.startswith(('x', 'a')) }} {{ u.upper() }} {{ u.lower() }}",
      "{{ 'hello world'.title() }} {{ \"they're 1st\".title() }} {{ 'hELLO'.capitalize() }} {{ 'aXb'.swapcase() }}",
      "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ u.find('wö') }}",
      "{{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.count('bc') }} {{ ', '.join(['a', 'b']) }}",
      "{{ '{} and {}'.format('x', 1) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}",
      "{{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ ''.isdigit() }}",
      "{{ 'prefix-x'.removeprefix('prefix-') }} {{ 'a=b=c'.partition('=') }} {{ '5'.zfill(3) }} {{ 'ab'.center(6, '*') }}",
      "{{ '%s-%d' % ('a', 3) }} {{ '%s' % 'x' }} {{ '%5.2f|%-4s|%03d' % (3.14159, 'ab', 7) }} {{ '%(a)s' % {'a': 1} }}",
      "{{ s|trim }}|{{ s|length }}|{{ l|length }}|{{ d|count }}|{{ undefined_thing|length }}|{{ u|wordcount }}",
      "{{ l|first }} {{ l|last }} {{ e|first }} {{ 'abc'|first }} {{ 'abc'|last }} {{ l|join(', ') }} {{ l|join }}",
      "{{ undefined_thing|default('dflt') }} {{ ''|default('e') }} {{ ''|default('f', true) }} {{ none|default('g') }} {{ z|d('h', boolean=true) }}",
      "{{ 'hello WORLD'|upper }} {{ 'HeLLo'|lower }} {{ 'hello world'|capitalize }} {{ \"they're here-now (ok)\"|title }}",
      "{{ 'aXbX'|replace('X', '-') }} {{ 'aXbX'|replace('X', '-', 1) }} {{ l|list }} {{ 'ab'|list }} {{ d|list }} {{ l|string }}",
      "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ true|int }} {{ none|int }}",
      "{{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 7|round }}",
      "{{ l|reverse|list }} {{ 'abc'|reverse }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ words|sort }} {{ words|sort(case_sensitive=true) }}",
      "{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ l|min }} {{ l|max }} {{ l|sum }} {{ words|max }}",
      "{{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }} {{ d|items|list }}",
      "{{ msgs|map(attribute='role')|list }} {{ msgs|map(attribute='nope', default='?')|list }} {{ l|map('string')|join('+') }}",
      "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}",
      "{{ msgs|selectattr('tool_calls', 'defined')|list|length }} {{ msgs|selectattr('tool_calls')|list|length }} {{ l|select('odd')|list }} {{ l|reject('even')|list }}",
      "{{ l|select('gt', 1)|list }} {{ l|select('in', [1, 3])|list }} {{ msgs|selectattr('content', 'string')|list|length }}",
      "{% if msgs|selectattr('role', 'equalto', 'nobody') %}gen-is-truthy{% endif %}{% if e|list %}x{% else %}empty{% endif %}",
      "{{ mixed|tojson }}|{{ d|tojson(indent=2) }}|{{ json_s|tojson }}|{{ mixed|tojson(separators=(',', ':')) }}",
      "{{ d|tojson(sort_keys=true) }}|{{ json_s|tojson(ensure_ascii=true) }}|{{ fl|tojson }}|{{ e|tojson(indent=4) }}|{{ {'a': {}}|tojson(indent=4) }}",
      "{{ mixed|tojson(indent='\\t') }}|{{ 'x'|tojson }}|{{ none|tojson }}|{{ 1.0|tojson }}|{{ (1, 2)|tojson }}",
      "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}",
      "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape }} {{ '<b>'|safe }} {{ '%s=%s'|format('a', 1) }}",
      "{{ n is defined }} {{ nope is defined }} {{ nope is undefined }} {{ none is none }} {{ s is string }} {{ n is number }} {{ t is number }}",
      "{{ n is integer }} {{ t is integer }} {{ f is float }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ n is iterable }}",
      "{{ l is sequence }} {{ d is sequence }} {{ t is boolean }} {{ t is true }} {{ 1 is true }} {{ false is false }} {{ n is odd }} {{ n is even }}",
      "{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2 is in l }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'x' is eq 'x' }}",
      "{{ n is ne 7 }} {{ n is gt 3 }} {{ n is lt(3) }} {{ n is ge 7 }} {{ n is le 6 }} {{ raise_exception is callable }} {{ n is not none }}",
      "{{ strftime_now('%Y-%m-%d %H:%M %b %B %A %a %j') }} {{ strftime_now('%d %b %Y') }}",
      "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ dict([['k', 1]]) }}",
      // scoping
      "{% set x = 0 %}{% for i in [1, 2] %}[{{ x }}]{% set x = x + i %}({{ x }}){% endfor %}{{ x }}",
      "{% for i in [1, 2] %}[{{ y }}]{% set y = i %}{% endfor %}[{{ y }}]",
      "{% set x = 5 %}{% if true %}{% set x = 1 %}{% endif %}{{ x }}",
      "{% set ns = namespace(count=0, items=[]) %}{% for m in msgs %}{% set ns.count = ns.count + 1 %}{% set ns.items = ns.items + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns.nope }}",
      "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}{% set t1 = 1, %}{{ t1 }}",
      "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}",
      "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
      "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner {{ n }}{% endcall %}",
      "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * (fact(k - 1)|int) }}{% endif %}{% endmacro %}{{ fact(6) }}",
      "{% filter upper %}shout {{ n }}{% endfilter %}|{% set block %}captured {{ n }}{% endset %}{{ block }}|{% set b2 | trim %}  x  {% endset %}[{{ b2 }}]",
      "{% with a = 1, b = n %}{{ a }}{{ b }}{% endwith %}[{{ a }}]",
      // loops
      "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
      "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}",
      "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }};{% else %}none{% endfor %}{% for x in e %}x{% else %}empty{% endfor %}",
      "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
      "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
      "{% for m in msgs[::-1] %}{{ (msgs|length - 1) - loop.index0 }}{{ m.role[0] }}{% endfor %}",
      "{% for c in 'héy' %}[{{ c }}]{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for x in undefined_thing %}never{% endfor %}",
      "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for t in d|dictsort %}{{ t[0] }}{% endfor %}",
      // literals and strings
      "{{ [1, 'two', [3], {'four': 4}, none, true] }} {{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ () }} {{ [1, 2,] }}",
      "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 'uni\\u00e9\\x41' }} {{ 'keep\\d' }} {{ 'a' 'b' }} {{ '\\\\' }}",
      "{{ ['it\\'s', \"q\\\"\", 'nl\\n', 'é', '\\u00a0', '\\x00'] }}",
      "{{ 1_000 }} {{ 0x10 }} {{ 1.5e3 }} {{ 0.5 }} {{ 00 }} {{ 2e-3 }}",
      "{{ 007 }}",
      "{# comment #}a{#- trimmed -#} b {#+ kept +#} c",
      "{% raw %}{{ not rendered }}{% endraw %}|{%- raw -%}  x  {%- endraw -%}  |",
      // tool-call shapes
      "{% for m in msgs %}{% if m.tool_calls is defined %}{% for tc in m.tool_calls %}{% set tc = tc.function if tc.function else tc %}{{ tc.name }}:{{ tc.arguments|tojson }}{% endfor %}{% endif %}{% endfor %}",
      "{% for m in msgs %}{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}<{{ c }}>{% endfor %}{% endif %}{% endfor %}",
      "{{ msgs[3].content }} {{ msgs[0] }}",
  };
  for (const char* t : templates) add_raw(g, t, ctx);
}

// Whitespace control: trim_blocks, lstrip_blocks, '-', '+', comments, trailing newline, CRLF.
void whitespace_cases() {
  const std::string g = "ws";
  const char* templates[] = {
      "  {% if true %}\n  x\n  {% endif %}\n  y\n{# c #}\nz\n",
      "{% if true %}  {% endif %}|\n{%- if true -%}  a  {%+ if true %}b{% endif +%}\n\nc{% endif %}",
      "x {% if true %}\ny{% endif %}  \n  {#c#}  \nz",
      "{{ 'v' }}  {% if true %}A{% endif %}\n  {{ 'w' }}\n",
      "a\n  {%- if true %}A{% endif %}\n\t\t{% for i in [1, 2] %}\n\t\t\t{{ i }}\n\t\t{% endfor %}\nend\n\n",
      "line1\r\nline2\r\n{% if true %}\r\nin\r\n{% endif %}\r\n",
      "{{- ' lead' -}}   \n   {{ 'x' -}}\n\n  {{- 'y' }}  {{- 'z' }}",
      "{%- for i in [1, 2, 3] -%}\n  {{ i }}\n{%- endfor %}\n",
      "{% for i in [1, 2] %}\n    {%- if i == 1 %}\n        one\n    {%- else %}\n        other\n    {%- endif %}\n{% endfor %}",
      "\n\n{% set x = 1 %}\n\n{{ x }}\n\n",
      "   {% if true %}   x   {% endif %}   ",
      "{% if true %}\n\n{% endif %}\n",
      "{{ '{{' }} {{ '}}' }} {{ {'a': {'b': 1}} }} {{ [[1]] }}",
      "   {# lstrip comment #}\nafter",
      "{% set x = 1 %}{% generation %}{% set x = 2 %}{{ x }}{% endgeneration %}{{ x }}",
      "é{% for m in ['ü', 'ab'] %}[{% generation %}{{ m }}{% endgeneration %}]{% endfor %}{% generation %}{% endgeneration %}",
      "{% for i in [1, 2] %}\n  {% generation %}\n  {{ i }}{% if loop.last %}{% generation %}last{% endgeneration %}{% endif %}\n  {% endgeneration %}\n{% endfor %}",
  };
  for (const char* t : templates) add_raw(g, t);
}

// Errors: the reference fails; we must fail (raise_exception: same message).
void error_cases() {
  const std::string g = "err";
  Value ctx = Value::parse(R"({"d": {"a": 1}, "l": [1], "none": null, "s": "x"})");
  const char* templates[] = {
      "{{ raise_exception('custom message: ' ~ d.a) }}",
      "{% if d.a == 1 %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
      "{{ undefined_thing.attr }}",
      "{{ undefined_thing + 1 }}",
      "{{ undefined_thing|tojson }}",
      "{{ 1 < 'a' }}",
      "{{ 'a' + 1 }}",
      "{{ none|length }}",
      "{{ d.a.b.c }}",
      "{{ l.append(2) }}",
      "{{ 1 / 0 }}",
      "{{ s.format_map }}{{ s.nope() }}",
      "{% set ns = namespace(_x=1) %}",
      "{% set ns = namespace() %}{% set ns._hidden = 1 %}",
      "{% set s.x = 1 %}",
      "{{ range(200000)|length }}",
      "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
      "{% for a, b in [1] %}{% endfor %}",
      "{{ undefined_fn() }}",
  };
  for (const char* t : templates) add_raw(g, t, ctx);
}

// ------------------------------------------------------------------------------------------------ chat templates
// Our own templates built from the constructs real models' templates use (not copies of them).

const char* kLlama3Like = R"TPL({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "01 Jan 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{#- pull out the system message #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Today: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("No first user message to carry the tools!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Functions you may call, as JSON:\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
        {%- if message.role == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}
        {%- else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("Only single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {%- generation %}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
        {%- endgeneration %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)TPL";

const char* kQwenLike = R"TPL({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- generation %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- content }}
            {%- endif %}
        {%- else %}
            {{- content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})TPL";

const char* kMistralLike = R"TPL({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {% generation %}{{- " " + message["content"]|trim + eos_token}}{% endgeneration %}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %})TPL";

const char* kGemmaLike = R"TPL({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)TPL";

const char* kPhi3Like =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
    "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif "
    "message['role'] == 'assistant' %}{{'<|assistant|>\n'}}{% generation %}{{message['content'] + "
    "'<|end|>'}}{% endgeneration %}{{'\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

const char* kLlama2Like =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{% generation %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endgeneration %}{% endif %}{% "
    "endfor %}";

const char* kChatmlGeneration =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}{% if message['role'] == 'assistant' "
    "%}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{% else %}{{ message['content'] + "
    "'<|im_end|>' }}{% endif %}{{ '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";

std::vector<Value> conversations() {
  static const char* convs[] = {
      R"({"messages": [{"role": "user", "content": "Hello!"}]})",
      R"({"messages": [{"role": "system", "content": "  You are helpful.  "}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "Tell me a joke."}]})",
      R"({"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
          {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]})",
      R"({"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]})",
      R"({"messages": [{"role": "system", "content": "Réponds en français 🇫🇷"},
          {"role": "user", "content": "héllo 中文 😀 <|im_end|> [INST] {{ x }} {% if %} <|eot_id|>\n\ttabs"},
          {"role": "assistant", "content": "مرحبا — ok <end_of_turn> </s>"}]})",
      R"({"messages": [{"role": "user", "content": "What's the weather in Paris?"},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 2}}}]},
          {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21.5}"},
          {"role": "assistant", "content": "It is 21.5 °C in Paris."}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
            "required": ["city"]}}}]})",
      R"({"messages": [{"role": "user", "content": "2+2?"},
          {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
          {"role": "user", "content": "and 3+3?"},
          {"role": "assistant", "content": "6", "reasoning_content": "easy one"}]})",
      R"({"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]})",
      R"({"messages": [{"role": "user", "content": "\n\n  padded question \n\n"},
          {"role": "assistant", "content": "  padded answer\n"}]})",
      R"({"messages": [{"role": "system", "content": "sys"}, {"role": "assistant", "content": "starts with assistant"}]})",
  };
  std::vector<Value> out;
  for (const char* c : convs) out.push_back(Value::parse(c));
  return out;
}

void chat_cases(const std::string& group, const char* tmpl) {
  Value extra = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  for (const auto& conv : conversations()) {
    add_chat(group, tmpl, conv, false, extra);
    add_chat(group, tmpl, conv, true, extra);
  }
  Value no_think = extra;
  no_think["enable_thinking"] = false;
  add_chat(group, tmpl, conversations()[6], true, no_think);
}

// Real templates from the pinned packages (see render_ref.py list-real).
Value& real_templates() {
  static Value v = Value::object();
  return v;
}

// ------------------------------------------------------------------------------------------------ harness

struct Outcome {
  bool ok = false;
  bool raised = false;  // TemplateRaised
  bool config_error = false;
  std::string text, error;
  std::vector<std::pair<size_t, size_t>> spans;
};

Outcome render_ours(const Value& spec) {
  Outcome o;
  try {
    Template t(spec.at("template").get<std::string>());
    ft::jinja::RenderOptions opts;
    opts.now = spec.at("now").get<std::time_t>();
    Value ctx = spec.at("mode") == "chat"
                    ? ft::jinja::make_chat_context(spec.at("messages"), spec.at("tools"), spec.at("documents"),
                                                   spec.at("add_generation_prompt").get<bool>(), spec.at("extra"))
                    : spec.at("context");
    auto r = t.render(ctx, opts);
    o.ok = true;
    o.text = r.text;
    o.spans = r.generation_spans;
  } catch (const ft::jinja::TemplateRaised& e) {
    o.raised = true;
    o.error = e.what();
  } catch (const ft::ConfigError& e) {
    o.config_error = true;
    o.error = e.what();
  } catch (const ft::Error& e) {
    o.error = e.what();
  }
  return o;
}

const std::map<std::string, Value>& reference() {
  static const std::map<std::string, Value> results = [] {
    std::map<std::string, Value> m;
    setenv("TZ", "UTC", 1);
    tzset();
    Value real = run_python({"list-real"});
    real_templates() = real;
    expression_cases();
    whitespace_cases();
    error_cases();
    chat_cases("llama3", kLlama3Like);
    chat_cases("qwen", kQwenLike);
    chat_cases("mistral", kMistralLike);
    chat_cases("gemma", kGemmaLike);
    chat_cases("phi3", kPhi3Like);
    chat_cases("llama2", kLlama2Like);
    chat_cases("chatml", kChatmlGeneration);
    for (const auto& [name, tmpl] : real.items()) chat_cases("real:" + name, tmpl.get<std::string>().c_str());
    Value batch = Value::array();
    for (const auto& c : all_cases()) batch.push_back(c.spec);
    std::string in = temp_path("in");
    {
      std::ofstream f(in);
      f << batch.dump();
    }
    Value out = run_python({"render", in});
    if (!std::getenv("FT_JINJA_KEEP_REF")) std::remove(in.c_str());
    for (const auto& r : out) m[r.at("id").get<std::string>()] = r;
    return m;
  }();
  return results;
}

// Compares every case whose id starts with `prefix`; returns how many were compared.
int compare_group(const std::string& prefix) {
  const auto& ref = reference();
  int n = 0;
  for (const auto& c : all_cases()) {
    if (c.id.rfind(prefix, 0) != 0) continue;
    ++n;
    const Value& want = ref.at(c.id);
    Outcome got = render_ours(c.spec);
    SCOPED_TRACE(c.id + "\ntemplate: " + c.spec.at("template").get<std::string>().substr(0, 300) +
                 "\ninput: " + c.spec.value("messages", c.spec.value("context", Value())).dump().substr(0, 300));
    if (want.at("ok").get<bool>()) {
      EXPECT_TRUE(got.ok) << "we failed where jinja2 rendered: " << got.error;
      if (!got.ok) continue;
      EXPECT_EQ(got.text, want.at("text").get<std::string>());
      std::vector<std::pair<size_t, size_t>> spans;
      for (const auto& s : want.at("spans")) spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
      EXPECT_EQ(got.spans, spans);
    } else {
      std::string type = want.at("error_type").get<std::string>();
      EXPECT_FALSE(got.ok) << "jinja2 failed (" << type << ": " << want.at("error").get<std::string>()
                           << ") but we rendered: " << got.text;
      if (type == "TemplateError") {
        EXPECT_TRUE(got.raised) << "expected raise_exception, got: " << got.error;
        EXPECT_EQ(got.error, want.at("error").get<std::string>());
      } else if (type == "TemplateSyntaxError" || type == "TemplateAssertionError") {
        EXPECT_TRUE(got.config_error) << got.error;
      } else {
        EXPECT_FALSE(got.raised) << got.error;
      }
    }
  }
  return n;
}

#define SKIP_WITHOUT_PYTHON() \
  if (!have_python()) GTEST_SKIP() << "no " << python() << " with jinja2 and transformers"

}  // namespace

TEST(PythonReference, ExpressionsFiltersTestsAndMethodsMatchJinja2) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("expr#"), 60);
}

TEST(PythonReference, WhitespaceControlMatchesJinja2) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("ws#"), 10);
}

TEST(PythonReference, RuntimeErrorsAndRaiseExceptionMatchJinja2) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("err#"), 10);
}

TEST(PythonReference, Llama3StyleTemplateWithToolsAndDateMatchesTransformers) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("llama3#"), 10);
}

TEST(PythonReference, QwenStyleTemplateWithThinkAndToolCallsMatchesTransformers) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("qwen#"), 10);
}

TEST(PythonReference, MistralStyleTemplateWithAlternationChecksMatchesTransformers) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("mistral#"), 10);
}

TEST(PythonReference, GemmaStyleTemplateWithRoleRenamingMatchesTransformers) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("gemma#"), 10);
}

TEST(PythonReference, Phi3AndLlama2AndChatmlTemplatesMatchTransformersIncludingGenerationSpans) {
  SKIP_WITHOUT_PYTHON();
  EXPECT_GT(compare_group("phi3#"), 10);
  EXPECT_GT(compare_group("llama2#"), 10);
  EXPECT_GT(compare_group("chatml#"), 10);
}

TEST(PythonReference, RealModelTemplatesFromPinnedPackagesMatchTransformers) {
  SKIP_WITHOUT_PYTHON();
  reference();
  if (real_templates().empty()) GTEST_SKIP() << "chat-bricks / llm-templates not installed in the venv";
  EXPECT_GT(compare_group("real:"), 50);
}
