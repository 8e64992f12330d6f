// Snippets rendered by pelican's Jinja interpreter and compared with Python jinja2 3.1
// configured like Hugging Face transformers (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, generation block, raise_exception, strftime_now pinned to
// 2026-01-15 10:30:00 UTC, tojson = json.dumps). Each expected string is jinja2's output for the
// same template and context (the context JSON loaded with json.loads, which keeps key order, as
// nlohmann::ordered_json does).
// For Error rows jinja2 raised a non-template error; only "it fails" is compared there.
#include <cstdlib>
#include <ctime>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "jinja/jinja.h"

namespace {

enum class Expect { Text, Raised, Error };

struct Case {
    const char* name;
    const char* tpl;
    const char* ctx;
    Expect expect;
    const char* text;  // rendered text, or raise_exception's message
};

const Case kCases[] = {
    {"print_scalars",
     "{{ 1 }}|{{ -3 }}|{{ 1.0 }}|{{ 0.1 }}|{{ 1e-5 }}|{{ 1e16 }}|{{ 1.5e300 }}|{{ 123.456 }}|{{ true }}|{{ "
     "false }}|{{ none }}|{{ 'x' }}",
     "{}", Expect::Text, "1|-3|1.0|0.1|1e-05|1e+16|1.5e+300|123.456|True|False|None|x"},
    {"print_containers",
     "{{ [1, 'a', none, true, 2.5] }}|{{ {'a': 1, 'b': [1, 2]} }}|{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ [] "
     "}}|{{ {} }}",
     "{}", Expect::Text, "[1, 'a', None, True, 2.5]|{'a': 1, 'b': [1, 2]}|(1, 2)|(1,)|()|[]|{}"},
    {"print_string_repr",
     "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'back\\\\slash', 'é😀', '\\x01'] }}",
     "{}", Expect::Text,
     "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'back\\\\slash', 'é😀', '\\x01']"},
    {"print_undefined", "[{{ nope }}][{{ nope is defined }}][{{ nope is undefined }}]", "{}", Expect::Text,
     "[][False][True]"},
    {"print_context", "{{ messages[0].content }}|{{ messages[0]['role'] }}|{{ messages|length }}",
     "{\"messages\": [{\"content\": \"hi\", \"role\": \"user\"}]}", Expect::Text, "hi|user|1"},
    {"json_floats", "{{ x }}|{{ x|tojson }}|{{ y }}|{{ y|tojson }}",
     "{\"x\": 1.0, \"y\": [0.1, 2.5e-07, 100.0]}", Expect::Text,
     "1.0|1.0|[0.1, 2.5e-07, 100.0]|[0.1, 2.5e-07, 100.0]"},
    {"arith",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 "
     "}} {{ 7.5 // 2 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ** "
     "3 ** 2 }}",
     "{}", Expect::Text, "3 -4 2 -2 3.5 2.0 1024 0.5 3.0 ababab [1, 1, 1] 7 9 4 64"},
    {"arith_float", "{{ 0.1 + 0.2 }} {{ 1 - 0.5 }} {{ 3 * 0.1 }} {{ 10 / 3 }} {{ 5.5 % 2 }} {{ -5.5 % 2 }}",
     "{}", Expect::Text, "0.30000000000000004 0.5 0.30000000000000004 3.3333333333333335 1.5 0.5"},
    {"concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ nope }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}", "{}", Expect::Text,
     "a1NoneTrue[1]|ab|[1, 2]"},
    {"compare",
     "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 "
     "}} {{ [1,2] < [1,3] }} {{ none == none }} {{ true == 1 }}",
     "{}", Expect::Text, "True False True True True True False True True True"},
    {"in_ops",
     "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'cat' }} {{ 3 not in [1] }} {{ "
     "'x' in nope }}",
     "{}", Expect::Text, "True True True True True False"},
    {"logic",
     "{{ 1 and 'x' }}|{{ 0 and 'x' }}|{{ 0 or 'y' }}|{{ '' or [] }}|{{ not 0 }}|{{ not 'a' }}|{{ none or 'd' "
     "}}",
     "{}", Expect::Text, "x|0|y|[]|True|False|d"},
    {"ternary",
     "{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}",
     "{}", Expect::Text, "y|n||b"},
    {"literals",
     "{{ 'a' 'b' }}|{{ \"dq\" }}|{{ 1_000 }}|{{ 0.5e1 }}|{{ True }}|{{ None }}|{{ 'esc\\t\\u00e9\\x41' }}",
     "{}", Expect::Text, "ab|dq|1000|5.0|True|None|esc\téA"},
    {"access",
     "{{ d.a }}|{{ d['a'] }}|{{ d.missing }}|{{ d.missing is defined }}|{{ l[0] }}|{{ l[-1] }}|{{ l[10] is "
     "defined }}|{{ s[1] }}|{{ s[-1] }}|{{ d.l.0 }}",
     "{\"d\": {\"a\": 1, \"l\": [5]}, \"l\": [1, 2, 3], \"s\": \"héllo\"}", Expect::Text,
     "1|1||False|1|3|False|é|o|5"},
    {"slices",
     "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ l[::2] }}|{{ l[::-2] }}|{{ l[5:] "
     "}}|{{ s[:100] }}|{{ l[-100:1] }}",
     "{\"l\": [1, 2, 3, 4, 5], \"s\": \"héllo😀\"}", Expect::Text,
     "él|😀olléh|o😀|[2, 3, 4, 5]|[1, 2, 3, 4]|[1, 3, 5]|[5, 3, 1]|[]|héllo😀|[1]"},
    {"none_attr", "{{ n.x is defined }}|{{ n.x }}|{{ 'str'.nope is defined }}", "{\"n\": null}", Expect::Text,
     "False||False"},
    {"dict_method_shadow",
     "{{ d['items'] }}|{{ d.get('items') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}",
     "{\"d\": {\"items\": 3}}", Expect::Text, "3|3|dflt|None"},
    {"f_length", "{{ 'héllo'|length }} {{ [1,2]|count }} {{ {'a':1}|length }} {{ nope|length }}", "{}",
     Expect::Text, "5 2 1 0"},
    {"f_first_last",
     "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]", "{}",
     Expect::Text, "1 3 a c []"},
    {"f_join", "{{ [1,2,3]|join(', ') }}|{{ ['a','b']|join }}|{{ users|join(', ', attribute='name') }}",
     "{\"users\": [{\"name\": \"x\"}, {\"name\": \"y\"}]}", Expect::Text, "1, 2, 3|ab|x, y"},
    {"f_case",
     "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello world-foo(bar'|title }} {{ 'hELLO "
     "wORLD'|capitalize }} {{ \"they're bill's\"|title }}",
     "{}", Expect::Text, "HELLO WORLD hello Hello World-Foo(Bar Hello world They're Bill's"},
    {"f_trim", "[{{ '  a b \\n'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ nope|trim }}]", "{}", Expect::Text,
     "[a b][a][]"},
    {"f_replace",
     "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '-') }}", "{}",
     Expect::Text, "bbb bba -a-b-"},
    {"f_default",
     "{{ nope|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) "
     "}} {{ 'x'|default('d') }} [{{ nope|default }}]",
     "{}", Expect::Text, "d None d z x []"},
    {"f_list_string",
     "{{ 'abc'|list }} {{ {'a':1,'b':2}|list }} {{ 1|string }} {{ [1]|string }} {{ none|string }}", "{}",
     Expect::Text, "['a', 'b', 'c'] ['a', 'b'] 1 [1] None"},
    {"f_int_float",
     "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ "
     "'3.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ true|int }} {{ ' 12 '|int }}",
     "{}", Expect::Text, "42 4 0 7 3 26 3.5 0.0 2.0 1 12"},
    {"f_abs_round",
     "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 10|round }} {{ "
     "2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ 1.23456|round(3) }}",
     "{}", Expect::Text, "3 2.5 2.0 4.0 2.67 10 3.0 2.0 1.235"},
    {"f_tojson",
     "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', "
     "':')) }}|{{ 'é\"\\n'|tojson }}|{{ none|tojson }}|{{ [1.0, true]|tojson }}|{{ {}|tojson(indent=2) }}|{{ "
     "[]|tojson(indent=2) }}",
     "{\"d\": {\"a\": \"xé\", \"b\": [1, {\"c\": null}]}}", Expect::Text,
     "{\"a\": \"xé\", \"b\": [1, {\"c\": null}]}|{\n  \"a\": \"xé\",\n  \"b\": [\n    1,\n    {\n      "
     "\"c\": null\n    }\n  ]\n}|{\"a\": \"xé\", \"b\": [1, {\"c\": "
     "null}]}|{\"a\":\"xé\",\"b\":[1,{\"c\":null}]}|\"é\\\"\\n\"|null|[1.0, true]|{}|[]"},
    {"f_tojson_ascii", "{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ d|tojson(indent='\\t') }}",
     "{\"d\": {\"k\": [1]}}", Expect::Text, "\"\\u00e9\\ud83d\\ude00\"|{\n\t\"k\": [\n\t\t1\n\t]\n}"},
    {"f_items_dictsort",
     "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d|dictsort %}{{ k }}={{ v }};{% "
     "endfor %}|{{ d|dictsort(reverse=true) }}|{{ d|dictsort(by='value') }}",
     "{\"d\": {\"C\": 2, \"a\": 3, \"b\": 1}}", Expect::Text,
     "C=2;a=3;b=1;|a=3;b=1;C=2;|[('C', 2), ('b', 1), ('a', 3)]|[('b', 1), ('C', 2), ('a', 3)]"},
    {"f_select",
     "{{ xs|select('odd')|list }}|{{ xs|reject('odd')|list }}|{{ xs|select|list }}|{{ xs|select('gt', "
     "2)|list }}|{{ xs|select('equalto', 3)|list }}",
     "{\"xs\": [0, 1, 2, 3, 4]}", Expect::Text, "[1, 3]|[0, 2, 4]|[1, 2, 3, 4]|[3, 4]|[3]"},
    {"f_selectattr",
     "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join(',') }}|{{ ms|rejectattr('role', "
     "'eq', 'user')|list|length }}|{{ ms|selectattr('x')|list }}|{{ ms|selectattr('x', "
     "'defined')|list|length }}",
     "{\"ms\": [{\"c\": \"1\", \"role\": \"user\"}, {\"c\": \"2\", \"role\": \"assistant\", \"x\": 1}, "
     "{\"c\": \"3\", \"role\": \"user\"}]}",
     Expect::Text, "1,3|1|[{'c': '2', 'role': 'assistant', 'x': 1}]|1"},
    {"f_map",
     "{{ ['a','b']|map('upper')|list }}|{{ ds|map(attribute='n', default='\?')|list }}|{{ [1, "
     "2]|map('string')|join('-') }}|{{ ds|map(attribute='n')|list }}",
     "{\"ds\": [{\"n\": 1}, {}]}", Expect::Text, "['A', 'B']|[1, '\?']|1-2|[1, Undefined]"},
    {"f_unique_reverse_sort",
     "{{ ['a','A','b','a']|unique|list }}|{{ [3,1,2]|reverse|list }}|{{ 'abc'|reverse }}|{{ [3,1,2]|sort "
     "}}|{{ [3,1,2]|sort(reverse=true) }}|{{ ['b','A','c']|sort }}|{{ "
     "['b','A','c']|sort(case_sensitive=true) }}|{{ ds|sort(attribute='k')|map(attribute='k')|list }}",
     "{\"ds\": [{\"k\": 2}, {\"k\": 1}]}", Expect::Text,
     "['a', 'b']|[2, 1, 3]|cba|[1, 2, 3]|[3, 2, 1]|['A', 'b', 'c']|['A', 'b', 'c']|[1, 2]"},
    {"f_sum_min_max",
     "{{ [1,2,3]|sum }} {{ ds|sum(attribute='v') }} {{ [1,2]|sum(start=10) }} {{ [3,1,2]|min }} {{ "
     "[3,1,2]|max }} {{ ['b','A']|min }} {{ ds|max(attribute='v') }} [{{ []|max }}]",
     "{\"ds\": [{\"v\": 1}, {\"v\": 5}]}", Expect::Text, "6 6 13 1 3 A {'v': 5} []"},
    {"f_batch", "{{ [1,2,3,4,5]|batch(2)|list }}|{{ [1,2,3]|batch(2, 'x')|list }}", "{}", Expect::Text,
     "[[1, 2], [3, 4], [5]]|[[1, 2], [3, 'x']]"},
    {"f_indent",
     "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent(2, blank=true) "
     "}}][{{ 'a\\nb'|indent('> ') }}]",
     "{}", Expect::Text, "[a\n    b\n\n    c][  a\n  b][a\n  \n  b][a\n> b]"},
    {"f_misc",
     "{{ 'a b  c'|wordcount }}|{{ 'ab'|center(6) }}|{{ '<a href=\"x\">&\\''|e }}|{{ '<b>'|escape }}|{{ "
     "'<b>'|safe }}|{{ '%s=%d'|format('x', 3) }}|{{ '%05.2f'|format(3.14159) }}",
     "{}", Expect::Text, "3|  ab  |&lt;a href=&#34;x&#34;&gt;&amp;&#39;|&lt;b&gt;|<b>|x=3|03.14"},
    {"markup_concat",
     "{{ '<'|safe + '<' }}|{{ '<' + '<'|safe }}|{{ '<'|safe ~ '<' }}|{{ ('a'|safe + {'k': '\"'}|tojson) }}",
     "{}", Expect::Text, "<&lt;|&lt;<|<<|a{&#34;k&#34;: &#34;\\&#34;&#34;}"},
    {"tests_types",
     "{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is number }}{{ true "
     "is boolean }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 'a' is "
     "iterable }}{{ 1 is iterable }}{{ nope is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ none is "
     "none }}{{ 0 is none }}",
     "{}", Expect::Text, "TrueTrueTrueFalseTrueTrueTrueTrueFalseTrueTrueFalseTrueTrueTrueTrueFalse"},
    {"tests_values",
     "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ true is true }}{{ 1 "
     "is true }}{{ false is false }}{{ 2 is in [1,2] }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is "
     "ge 2 }}{{ 'A' is upper }}{{ 'a' is lower }}{{ 1 is not string }}{{ x is callable }}",
     "{\"x\": 1}", Expect::Text, "TrueTrueTrueFalseTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"},
    {"tests_defined_chain",
     "{{ m.tool_calls is defined }}{{ m.content is defined and m.content is not none }}{{ m.content is "
     "string }}",
     "{\"m\": {\"content\": null}}", Expect::Text, "FalseFalseFalse"},
    {"if_elif",
     "{% for x in [1,2,3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}",
     "{}", Expect::Text, "one,two,many,"},
    {"for_loop_vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ "
     "loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', "
     "'e') }};{% endfor %}",
     "{}", Expect::Text, "1032TrueFalse3bo;2121FalseFalse3ace;3210FalseTrue3bo;"},
    {"for_else",
     "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in nope %}x{% else %}undef{% endfor %}", "{}",
     Expect::Text, "empty|undef"},
    {"for_filter",
     "{% for x in range(10) if x is odd %}{{ x }}{{ '/' ~ loop.length if loop.last }},{% endfor %}", "{}",
     Expect::Text, "1,3,5,7,9/5,"},
    {"for_dict",
     "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}|{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{{ "
     "v }}{% endfor %}|{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}",
     "{}", Expect::Text, "ba|b1a2|37"},
    {"for_break_continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif "
     "%}{{ x }}{% endfor %}",
     "{}", Expect::Text, "0134"},
    {"for_nested_loop",
     "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% "
     "endfor %}",
     "{}", Expect::Text, "113 214 1|123 224 2|"},
    {"for_scope", "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}",
     "{}", Expect::Text, "111;111;1"},
    {"range", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(5, 0, -2)|list }}{{ range(0)|list }}",
     "{}", Expect::Text, "[0, 1, 2][1, 3, 5][5, 3, 1][]"},
    {"set_forms",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set s %}x{{ a }}y{% endset %}[{{ s "
     "}}]{% set u | upper %}abc{% endset %}{{ u }}",
     "{}", Expect::Text, "12(1, 2)[x1y]ABC"},
    {"namespace",
     "{% set ns = namespace(n=0, found=false) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% if i == 2 "
     "%}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }}{% set ns2 = "
     "namespace({'a': 1}) %}{{ ns2.a }}",
     "{}", Expect::Text, "6 True1"},
    {"macro",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', "
     "'\?') }} {{ greet(punct='.', name='C') }}",
     "{}", Expect::Text, "Hi A! Hi B\? Hi C."},
    {"macro_scope",
     "{% set g = 'G' %}{% macro m(x) %}{{ g }}{{ x }}{% set g = 'L' %}{{ g }}{% endmacro %}{{ m(1) }}{{ g "
     "}}{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}|{{ rec(3) }}",
     "{}", Expect::Text, "G1LG|3210"},
    {"macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}",
     "{}", Expect::Text, "[1][][False]"},
    {"filter_block",
     "{% filter upper %}abc {{ 'd' }}{% endfilter %}|{% filter trim|upper %}  x  {% endfilter %}", "{}",
     Expect::Text, "ABC D|X"},
    {"raw_block", "{% raw %}{{ not evaluated }}{% endraw %}", "{}", Expect::Text, "{{ not evaluated }}"},
    {"comments", "a{# comment #}b{#- trimmed -#}   c", "{}", Expect::Text, "abc"},
    {"generation", "{% generation %}gen {{ 1 }}{% endgeneration %}", "{}", Expect::Text, "gen 1"},
    {"dict_literal_and_call",
     "{{ dict(a=1, b='x') }}|{{ {'a': 1}.items()|list }}|{{ {'a': 1}.keys()|list }}|{{ {'a': "
     "1}.values()|list }}",
     "{}", Expect::Text, "{'a': 1, 'b': 'x'}|[('a', 1)]|['a']|[1]"},
    {"ws_minus", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e", "{}", Expect::Text, "abcde"},
    {"ws_trim_lstrip", "<\n  {% if true %}\n    x\n  {% endif %}\n>", "{}", Expect::Text, "<\n    x\n>"},
    {"ws_plus", "a\n  {%+ if true %}x{% endif %}\nb", "{}", Expect::Text, "a\n  xb"},
    {"ws_inline", "a {% if true %}b{% endif %} c\n{% for x in [1] %}\n{{ x }}\n{% endfor %}\nend\n", "{}",
     Expect::Text, "a b c\n1\nend"},
    {"ws_var_no_lstrip", "a\n  {{ 'b' }}\n  c", "{}", Expect::Text, "a\n  b\n  c"},
    {"ws_comment_line", "a\n  {# c #}\nb", "{}", Expect::Text, "a\nb"},
    {"ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", "{}", Expect::Text, "a\nb\nc"},
    {"ws_trailing", "x\n\n", "{}", Expect::Text, "x\n"},
    {"str_methods",
     "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) "
     "}}|{{ '  x '.strip() }}|{{ 'xxyxx'.lstrip('x') }}|{{ 'xxyxx'.rstrip('x') }}|{{ 'ab'.upper() }}{{ "
     "'AB'.lower() }}",
     "{}", Expect::Text, "['a', 'b', '', 'c']|['a', 'b']|['a', 'b,c']|['a,b', 'c']|x|yxx|xxy|ABab"},
    {"str_methods2",
     "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'hello'.find('l') }}{{ "
     "'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'hello'.count('l') }}{{ 'hello'.replace('l', 'L') }}{{ "
     "'hello'.replace('l', 'L', 1) }}{{ 'hello world'.title() }}{{ 'hello'.capitalize() }}",
     "{}", Expect::Text, "TrueTrue23-12heLLoheLloHello WorldHello"},
    {"str_methods3",
     "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') "
     "}}|{{ '{{}}'.format() }}|{{ '-'.join(['a', 'b']) }}|{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' "
     "'.isspace() }}{{ 'a1'.isalnum() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}|{{ "
     "'a\\nb\\r\\nc'.splitlines() }}",
     "{}", Expect::Text, "a and 1|xyx|n!|{}|a-b|TrueTrueTrueTrueTrueTrue|['a', 'b', 'c']"},
    {"str_unicode",
     "{{ 'éa'|upper }}|{{ 'ÉA'|lower }}|{{ 'naïve café'|title }}|{{ 'añb'.split('ñ') }}|{{ 'ñ'|length }}|{{ "
     "'a😀b'[1] }}|{{ 'a😀b'.find('b') }}",
     "{}", Expect::Text, "ÉA|éa|Naïve Café|['a', 'b']|1|😀|2"},
    {"err_raise", "{{ raise_exception('boom: ' ~ 1) }}", "{}", Expect::Raised, "boom: 1"},
    {"err_undefined_attr", "{{ nope.attr }}", "{}", Expect::Error, ""},
    {"err_append", "{% set l = [] %}{% set _ = l.append(1) %}", "{}", Expect::Error, ""},
    {"err_add_types", "{{ 'a' + 1 }}", "{}", Expect::Error, ""},
    {"err_divzero", "{{ 1 / 0 }}", "{}", Expect::Error, ""},
    {"err_unknown_filter_runtime", "{% if false %}{{ x|nosuchfilter }}{% endif %}ok", "{}", Expect::Text,
     "ok"},
    {"ws_minus_lstrip_mix", "a\n  {%- if true %}\n  b\n  {%- endif %}\nc", "{}", Expect::Text, "a  bc"},
    {"ws_block_end_minus_newlines", "{% if true -%}\n\n   x\n{%- endif %}\n\ny", "{}", Expect::Text, "x\ny"},
    {"ws_var_end_minus", "{{ 'a' -}}\n\n  b", "{}", Expect::Text, "ab"},
    {"ws_lstrip_after_var", "{{ 'v' }}  {% if true %}x{% endif %}", "{}", Expect::Text, "v  x"},
    {"ws_lstrip_tab", "a\n\t {% if true %}x{% endif %}", "{}", Expect::Text, "a\nx"},
    {"ws_nested_blocks", "{% for m in ms %}\n  {% if m %}\n    [{{ m }}]\n  {% endif %}\n{% endfor %}\n",
     "{\"ms\": [1, 0, 2]}", Expect::Text, "    [1]\n    [2]\n"},
    {"ws_comment_minus", "a  {#- c -#}  b\n{# line #}\nc", "{}", Expect::Text, "ab\nc"},
    {"ws_start_lstrip", "   {% if true %}x{% endif %}", "{}", Expect::Text, "x"},
    {"ws_raw_strip", "a  {%- raw -%}  {{ x }}  {%- endraw -%}  b", "{}", Expect::Text, "a{{ x }}b"},
    {"loop_cycle_index", "{% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{% endfor %}", "{}", Expect::Text,
     "aba"},
    {"loop_outer",
     "{% for a in [1,2] %}{% set outer = loop %}{% for b in [1] %}{{ outer.index }}{{ loop.index }}{% endfor "
     "%}{% endfor %}",
     "{}", Expect::Text, "1121"},
    {"is_test_precedence",
     "{{ not x is defined }}|{{ x is defined and x }}|{{ 1 + 1 is even }}|{{ -1 is number }}", "{}",
     Expect::Text, "True|False|1|True"},
    {"filter_precedence",
     "{{ -3|abs }}|{{ 'a' ~ 'b'|upper }}|{{ [1,2]|length + 1 }}|{{ 1 if [1]|length else 2 }}", "{}",
     Expect::Text, "3|aB|3|1"},
    {"unary_minus_filter", "{{ -(3)|abs }}|{{ - 2 ** 2 }}", "{}", Expect::Text, "3|4"},
    {"set_tuple_unpack", "{% set a, b = 'xy' %}{{ b }}{{ a }}", "{}", Expect::Text, "yx"},
    {"items_loop_unpack", "{% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}",
     "{\"d\": {\"x\": 1, \"y\": [2]}}", Expect::Text, "x:1 y:[2] "},
    {"macro_default_ref_param", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", "{}",
     Expect::Text, "3,6"},
    {"macro_in_loop", "{% macro f(x) %}<{{ x }}>{% endmacro %}{% for i in [1,2] %}{{ f(i) }}{% endfor %}",
     "{}", Expect::Text, "<1><2>"},
    {"macro_returns_str", "{% macro f() %}  x {% endmacro %}[{{ f()|trim }}]{{ f()|length }}", "{}",
     Expect::Text, "[x]4"},
    {"string_in_list_eq", "{{ ['a', 'b'] == ['a', 'b'] }}{{ {'a': 1} == {'a': 1} }}{{ (1, 2) == [1, 2] }}",
     "{}", Expect::Text, "TrueTrueFalse"},
    {"none_compare", "{{ none == false }}{{ none is none }}{{ none != 0 }}", "{}", Expect::Text,
     "FalseTrueTrue"},
    {"bool_arith", "{{ true + 1 }}{{ true + true }}{{ false * 3 }}", "{}", Expect::Text, "220"},
    {"int_division_neg", "{{ -1 // 3 }} {{ 1 // -3 }} {{ -1 % 3 }} {{ 1 % -3 }} {{ -6 // 3 }}", "{}",
     Expect::Text, "-1 -1 2 -2 -2"},
    {"string_multiply_neg", "[{{ 'ab' * 0 }}][{{ 'ab' * -1 }}][{{ '=' * 5 }}]", "{}", Expect::Text,
     "[][][=====]"},
    {"float_repr_edge",
     "{{ 1/3 }} {{ 2/3 }} {{ 100.0 }} {{ 1e15 }} {{ 1e16 }} {{ 12345678901234567.0 }} {{ 0.0001 }} {{ "
     "0.00001 }} {{ -0.0 }} {{ 3.0 * 1.1 }}",
     "{}", Expect::Text,
     "0.3333333333333333 0.6666666666666666 100.0 1000000000000000.0 1e+16 1.2345678901234568e+16 0.0001 "
     "1e-05 -0.0 3.3000000000000003"},
    {"tojson_nested_indent", "{{ x|tojson(indent=4) }}",
     "{\"x\": {\"a\": [], \"b\": {}, \"c\": [{\"d\": 1.5}], \"e\": \"q\\\"\\\\\\n\\t\\u0001\177\"}}",
     Expect::Text,
     "{\n    \"a\": [],\n    \"b\": {},\n    \"c\": [\n        {\n            \"d\": 1.5\n        }\n    "
     "],\n    \"e\": \"q\\\"\\\\\\n\\t\\u0001\177\"\n}"},
    {"tojson_string_control", "{{ s|tojson }}", "{\"s\": \"a\\u0000b\\u001fc d😀\"}", Expect::Text,
     "\"a\\u0000b\\u001fc d😀\""},
    {"unicode_escapes_print", "{{ ['\\u200b', '\\u00a0', 'x\\u0085', '\\ud7ff'] }}", "{}", Expect::Text,
     "['\\u200b', '\\xa0', 'x\\x85', '\\ud7ff']"},
    {"startswith_tuple_none", "{{ 'abc'.startswith(('x', 'a')) }}", "{}", Expect::Text, "True"},
    {"split_whitespace_max",
     "{{ '  a b  c  '.split(none, 1) }}|{{ '  a b  c  '.rsplit(none, 1) }}|{{ 'a b'.split(' ') }}|{{ "
     "''.split() }}|{{ ''.split(',') }}",
     "{}", Expect::Text, "['a', 'b  c  ']|['  a b', 'c']|['a', 'b']|[]|['']"},
    {"strip_unicode_ws", "[{{ '\\u3000 a \\u00a0'.strip() }}][{{ '\\u3000 a \\u00a0'|trim }}]", "{}",
     Expect::Text, "[a][a]"},
    {"dict_get_default_none", "{{ d.get('a') }}|{{ d.get('b') is none }}|{{ d.a.b is defined }}",
     "{\"d\": {\"a\": {\"x\": 1}}}", Expect::Text, "{'x': 1}|True|False"},
    {"attr_on_list_item_missing", "{{ l[5].x is defined }}", "{\"l\": [1]}", Expect::Error, ""},
    {"length_of_dict_items", "{{ d.items()|list|length }}{{ d|length }}", "{\"d\": {\"a\": 1}}", Expect::Text,
     "11"},
    {"for_over_string_items", "{% for c in 'ab' %}{{ c }}.{% endfor %}", "{}", Expect::Text, "a.b."},
    {"nested_ternary_filter", "{{ (x|default('')) if x is defined else 'none' }}", "{}", Expect::Text,
     "none"},
    {"concat_list_tuple_err", "{{ [1] + (2,) }}", "{}", Expect::Error, ""},
    {"namespace_attr_missing", "{% set ns = namespace() %}[{{ ns.missing }}][{{ ns.missing is defined }}]",
     "{}", Expect::Text, "[][False]"},
    {"set_in_if_visible", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}", "{}", Expect::Text, "5"},
    {"loop_var_after_loop", "{% for i in [1,2] %}{% endfor %}[{{ i }}]", "{}", Expect::Text, "[]"},
    {"round_negative_half", "{{ -0.5|round }} {{ 0.5|round }} {{ 1.5|round }} {{ -1.5|round }}", "{}",
     Expect::Text, "-0.0 0.0 2.0 -2.0"},
    {"wordcount_unicode", "{{ 'héllo wörld, 123_x'|wordcount }}", "{}", Expect::Text, "3"},
    {"title_filter_vs_method", "{{ 'o\\'neil mc-donald'|title }}|{{ 'o\\'neil mc-donald'.title() }}", "{}",
     Expect::Text, "O'neil Mc-Donald|O'Neil Mc-Donald"},
    {"center_odd", "[{{ 'abc'|center(6) }}][{{ 'ab'|center(7) }}]", "{}", Expect::Text, "[ abc  ][   ab  ]"},
    {"reject_no_test", "{{ [0, 1, '', 'a', none]|reject|list }}", "{}", Expect::Text, "[0, '', None]"},
    {"select_in_if_generator_truthy", "{% if []|select('odd') %}T{% else %}F{% endif %}", "{}", Expect::Text,
     "T"},
    {"map_on_none", "{{ none|map(attribute='x')|list }}", "{}", Expect::Text, "[]"},
    {"unique_attribute", "{{ ds|unique(attribute='k')|list }}",
     "{\"ds\": [{\"k\": 1}, {\"k\": 1}, {\"k\": 2}]}", Expect::Text, "[{'k': 1}, {'k': 2}]"},
    {"strftime", "{{ strftime_now('%Y-%m-%d %H:%M %A %b') }}", "{}", Expect::Text,
     "2026-01-15 10:30 Thursday Jan"},
    // Dicts keep insertion order (context objects included); only dictsort and sort_keys sort.
    {"dict_key_order",
     "{{ d|tojson }}|{{ d }}|{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d|list }}|{{ d.keys()|list "
     "}}|{{ "
     "d.values()|list }}|{{ d|dictsort }}|{{ d|tojson(sort_keys=true) }}|{{ {'z': 1, 'a': 2, 'z': 3} }}|{{ "
     "dict(z=1, a=2)|tojson }}|{% set ns = namespace(z=1, a=2) %}{% set ns.b = 0 %}{{ ns.z }}{{ ns.a }}{{ "
     "ns.b }}",
     "{\"d\": {\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}, \"mid\": [{\"q\": 1, \"c\": 2}]}}", Expect::Text,
     "{\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}, \"mid\": [{\"q\": 1, \"c\": 2}]}|{'zeta': 1, 'alpha': "
     "{'y': 2, "
     "'b': 3}, 'mid': [{'q': 1, 'c': 2}]}|zetaalphamid|['zeta', 'alpha', 'mid']|['zeta', 'alpha', 'mid']|[1, "
     "{'y': 2, 'b': 3}, [{'q': 1, 'c': 2}]]|[('alpha', {'y': 2, 'b': 3}), ('mid', [{'q': 1, 'c': 2}]), "
     "('zeta', "
     "1)]|{\"alpha\": {\"b\": 3, \"y\": 2}, \"mid\": [{\"c\": 2, \"q\": 1}], \"zeta\": 1}|{'z': 3, 'a': "
     "2}|{\"z\": 1, "
     "\"a\": 2}|120"},
};

class JinjaPython : public ::testing::TestWithParam<Case> {
protected:
    static void SetUpTestSuite() {
        setenv("TZ", "UTC", 1);
        tzset();
    }
};

TEST_P(JinjaPython, MatchesJinja2) {
    const Case& c = GetParam();
    auto t = pelican::jinja::Template::parse(c.tpl);
    pelican::jinja::RenderOptions opt;
    opt.now = 1768473000;  // 2026-01-15 10:30:00 UTC
    std::string got, err;
    if (t) {
        auto r = t->render(nlohmann::ordered_json::parse(c.ctx), opt);
        if (r)
            got = *r;
        else
            err = r.error().message;
    } else {
        err = t.error().message;
    }
    switch (c.expect) {
        case Expect::Text:
            ASSERT_TRUE(err.empty()) << err;
            EXPECT_EQ(got, c.text);
            break;
        case Expect::Raised:
            EXPECT_EQ(err, c.text);
            break;
        case Expect::Error:
            EXPECT_FALSE(err.empty()) << "rendered: " << got;
            break;
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaPython, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
