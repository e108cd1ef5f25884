// The Jinja interpreter (src/tokenizer/jinja/) on its own. Every expected string here is what
// Python's jinja2 3.1 prints for the same template in transformers' environment (checked when
// these tests were written); the real models' templates are checked in test_chat_template.cpp.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/template.h"

namespace ferry::tokenizer::jinja {
namespace {

std::tm fixed_now() {
    std::tm t{};
    t.tm_year = 125;  // 2025-07-26 14:30:05, a Saturday
    t.tm_mon = 6;
    t.tm_mday = 26;
    t.tm_hour = 14;
    t.tm_min = 30;
    t.tm_sec = 5;
    std::mktime(&t);
    return t;
}

const char* kVars = R"({
    "l": [1, 2, 3], "d": {"a": 1, "items": 5}, "s": "héllo", "x": [1],
    "users": [{"name": "ann", "active": true, "role": "admin", "address": {"city": "Oslo"}},
              {"name": "bob", "active": false, "role": "user"},
              {"name": "cy", "active": true, "role": "user"}]})";

// The rendered text, or "ERR <message>" so a failing test shows why.
std::string render(const std::string& src, RenderOptions opts = {}) {
    auto t = Template::parse(src);
    if (!t) return "ERR " + t.error().message;
    static const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(kVars);
    std::vector<std::pair<std::string, Value>> vars;
    for (const auto& [k, v] : parsed.items()) vars.emplace_back(k, from_json(v));
    if (!opts.now) opts.now = fixed_now();
    auto r = t->render(vars, opts);
    return r ? *r : "ERR " + r.error().message;
}

TEST(Jinja, ArithmeticAndOperatorsArePythons) {
    // jinja2's ** is left-associative and binds after unary minus: (2**3)**2, (-2)**2.
    EXPECT_EQ(
        render(
            "{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ not 1 == 2 }}|{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|"
            "{{ 10 / 4 }}|{{ 'x' ~ 1.5 ~ [1] }}|{{ 'ab' * 3 }}|{{ [1,2] + [3] }}|{{ 3 * 'ab' }}"),
        "64|4|True|7|9|2.5|x1.5[1]|ababab|[1, 2, 3]|ababab");
    EXPECT_EQ(
        render("{{ 0.1 + 0.2 }}|{{ 1e100 }}|{{ 1.5e-7 }}|{{ 123456789.0 }}|{{ 2 ** 62 }}|{{ -7 // "
               "2 }}|"
               "{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ -7.5 // 2 }}|{{ 3 / 1 }}|{{ 1.0 * 3 }}"),
        "0.30000000000000004|1e+100|1.5e-07|123456789.0|4611686018427387904|-4|2|1.5|-4.0|3.0|3.0");
    EXPECT_EQ(
        render("{{ 1 < 2 < 3 }}|{{ 3 > 2 > 5 }}|{{ 0 or 'b' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|"
               "{{ none or [] }}|{{ 'yes' if 1 else 'no' }}|[{{ 'yes' if 0 }}]"),
        "True|False|b|b||[]|yes|[]");
    EXPECT_EQ(
        render("{{ 'é' == 'é' }}|{{ [1, 2] == [1, 2.0] }}|{{ [1] == (1,) }}|"
               "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}|{{ 1 == true }}|{{ none == none }}|"
               "{{ '1' == 1 }}"),
        "True|True|False|True|True|True|False");
    EXPECT_EQ(render("{{ 'x' in 'xyz' }}|{{ 'a' in d }}|{{ 2 not in l }}|{{ 'a' in d.keys() }}"),
              "True|True|False|True");
}

TEST(Jinja, PrintsValuesAsPythonsStr) {
    EXPECT_EQ(
        render("{{ true }}|{{ none }}|{{ 1.0 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 1.5e-5 }}|{{ -0.0 }}|"
               "{{ 1e300 * 1e300 }}|{{ [1, 'a', none, true, 1.0] }}|{{ {'a': 1} }}|{{ (1,) }}|{{ "
               "() }}"),
        "True|None|1.0|1e+16|1000000000000000.0|1.5e-05|-0.0|inf|[1, 'a', None, True, 1.0]|"
        "{'a': 1}|(1,)|()");
    // repr picks its quotes and escapes as Python does.
    EXPECT_EQ(render(R"({{ ['a', "b'c", 'd"e', "f'g\"h", 'ü\n', '\x07', '\u2028'] }})"),
              R"(['a', "b'c", 'd"e', 'f\'g"h', 'ü\n', '\x07', '\u2028'])");
    EXPECT_EQ(render("{{ {'k': (1, 'v'), 2: none} }}|{{ [[], {}, ()] }}|{{ [true, 1.0, -0.5] }}"),
              "{'k': (1, 'v'), 2: None}|[[], {}, ()]|[True, 1.0, -0.5]");
    EXPECT_EQ(render(R"({{ "a" "b" 'c' }}|{{ 'uni\u00e9\x41\101' }}|{{ 'back\\slash \d' }})"),
              R"(abc|uniéAA|back\slash \d)");
}

TEST(Jinja, StringsIndexByCodePoint) {
    EXPECT_EQ(
        render(
            "{{ s|length }}|{{ s[1] }}|{{ s.upper() }}|{{ 'héllo wörld'[1:4] }}|{{ 'héllo'[-2:] }}|"
            "{{ 'héllo'[::2] }}|{{ [1,2,3,4,5][1:-1:2] }}|{{ [1,2,3][-5:10] }}|{{ 'abc'[10:] }}|"
            "{{ (1,2,3)[1:] }}|{{ 'abc'[::-1] }}"),
        "5|é|HÉLLO|éll|lo|hlo|[2, 4]|[1, 2, 3]||(2, 3)|cba");
    EXPECT_EQ(render("{{ 'ÉCOLE straße'|lower }}|{{ 'straße'|upper }}|{{ 'ΣΑΣ'|lower }}|{{ "
                     "'İ'|lower|length }}|"
                     "{{ 'ǅ'|upper }}|{{ 'Ωmega'.swapcase() }}"),
              "école straße|STRASSE|σας|2|Ǆ|ωMEGA");
}

TEST(Jinja, StringMethods) {
    EXPECT_EQ(
        render("{{ ' \\u3000x\\xa0 '|trim }}|{{ 'a-b'.split('-') }}|{{ 'a  b\tc\n'.split() }}|"
               "{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'x'.center(5, '*') }}|{{ 'ab'.center(5) }}|"
               "{{ '42'.zfill(5) }}|{{ 'a=b=c'.partition('=') }}|{{ 'Hello'.removeprefix('He') }}"),
        "x|['a', 'b']|['a', 'b', 'c']|['a,b', 'c']|**x**|  ab |00042|('a', '=', 'b=c')|llo");
    EXPECT_EQ(render("{{ 'ab'.startswith(('x','a')) }}|{{ 'abc'.find('c') }}|{{ ' x '.strip() }}|"
                     "{{ 'xay'.strip('xy') }}|{{ 'a'.join(['1','2']) }}|{{ 'a,b,,c'.split(',') }}|"
                     "{{ 'a b c'.split(' ', 1) }}|{{ 'hé€x'.find('x') }}"),
              "True|2|x|a|1a2|['a', 'b', '', 'c']|['a', 'b c']|3");
    EXPECT_EQ(
        render(
            "{{ 'they\\'re bill\\'s friends'.title() }}|{{ 'they\\'re bill\\'s friends'|title }}|"
            "{{ 'hello world-foo (bar'|title }}|{{ 'hELLO'|capitalize }}"),
        "They'Re Bill'S Friends|They're Bill's Friends|Hello World-Foo (Bar|Hello");
    EXPECT_EQ(
        render(
            "{{ '{:>6}|{:<4}|{:^7}|{:.2f}|{:05d}|{!r}|{:+d}'.format('ab', 'c', 'mid', 3.14159, 42, "
            "'q', 5) }}|{{ '%5.1f%%|%-4s|%03d|%x|%r' % (2.25, 'a', 7, 255, 'z') }}|"
            "{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }}|{{ '{} {}'.format(1, 'b') }}|{{ "
            "'{a}'.format(a=2) }}"),
        "    ab|c   |  mid  |3.14|00042|'q'|+5|  2.2%|a   |007|ff|'z'|x-2|1 b|2");
    EXPECT_EQ(render("{{ 'a'.join(['x', 1]) }}"),
              "ERR line 1: sequence item 1: expected str instance, int found");
}

TEST(Jinja, ToJsonIsTransformersJsonDumps) {
    EXPECT_EQ(render("{{ {'a': [1, 2.0, 'é\\n\"'], 'b': none}|tojson }}"),
              R"({"a": [1, 2.0, "é\n\""], "b": null})");
    EXPECT_EQ(render("{{ {'a': [1, {}], 'c': []}|tojson(indent=2) }}"),
              "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"c\": []\n}");
    EXPECT_EQ(
        render("{{ 'é'|tojson(ensure_ascii=true) }}|{{ {'b':1,'a':2}|tojson(sort_keys=true) }}|"
               "{{ [1,[2]]|tojson(separators=(',',':')) }}|{{ {'a':[1]}|tojson(indent='\\t') }}|"
               "{{ '😀'|tojson(ensure_ascii=true) }}|{{ [1.5, true, none, 'a\\tb']|tojson }}|{{ "
               "(1,2)|tojson }}"),
        "\"\\u00e9\"|{\"a\": 2, \"b\": 1}|[1,[2]]|{\n\t\"a\": [\n\t\t1\n\t]\n}|\"\\ud83d\\ude00\"|"
        "[1.5, true, null, \"a\\tb\"]|[1, 2]");
    // HTML characters stay as they are (jinja2's own tojson would escape them).
    EXPECT_EQ(render("{{ '<a>&'|tojson }}|{{ {1: 2, none: 3}|tojson }}"),
              R"("<a>&"|{"1": 2, "null": 3})");
    EXPECT_EQ(render("{{ nothing|tojson }}"),
              "ERR line 1: Object of type Undefined is not JSON serializable");
}

TEST(Jinja, Filters) {
    EXPECT_EQ(
        render(
            "{{ [3,1,2]|sort(reverse=true) }}|"
            "{{ [{'n':'b','v':2},{'n':'A','v':1}]|sort(attribute='n')|map(attribute='v')|list }}|"
            "{{ ['b','a','B']|unique|list }}|{{ ['b','a','B']|unique(case_sensitive=true)|list }}|"
            "{{ [[1,2],[1,1]]|sort }}|{{ ['b','A','c']|sort }}"),
        "[3, 2, 1]|[1, 2]|['b', 'a']|['b', 'a', 'B']|[[1, 1], [1, 2]]|['A', 'b', 'c']");
    EXPECT_EQ(render("{{ {'b':1,'a':2,'C':0}|dictsort }}|{{ {'b':1,'a':2}|dictsort(by='value', "
                     "reverse=true) }}|"
                     "{{ [1,2,3,4,5]|batch(2, 'x')|list }}|{{ [1,2,3]|sum(start=10) }}|"
                     "{{ [{'x':3},{'x':1}]|min(attribute='x') }}|{{ ['b','A']|max }}"),
              "[('a', 2), ('b', 1), ('C', 0)]|[('a', 2), ('b', 1)]|[[1, 2], [3, 4], [5, "
              "'x']]|16|{'x': 1}|b");
    EXPECT_EQ(render("{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ -1.5|round }}|"
                     "{{ 1.2345|round(2, 'ceil') }}|{{ 7|round }}|{{ 12345|round(-2) }}"),
              "2.0|4.0|2.67|-2.0|1.24|7|12300");
    EXPECT_EQ(render("{{ ' 12 '|int }}|{{ '0x1A'|int(base=16) }}|{{ '1_000'|int }}|{{ '3.9'|int }}|"
                     "{{ 'abc'|int(7) }}|{{ true|int }}|{{ '1e3'|float }}|{{ ' inf '|float }}|{{ "
                     "'x'|float(1.5) }}|"
                     "{{ none|int }}"),
              "12|26|1000|3|7|1|1000.0|inf|1.5|0");
    EXPECT_EQ(render("{{ '<a href=\"x\">&\\'</a>'|e }}|{{ 'a b\\nc'|wordcount }}|{{ "
                     "'x'|replace('x', 'y') }}|"
                     "{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|reverse }}|{{ '%s and "
                     "%s'|format('a', 'b') }}|"
                     "{{ [1,2]|first }}|{{ 'abc'|last }}|{{ {'k':1}|first }}|{{ '<b>'|safe }}"),
              "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;|3|y|bba|ba|a and b|1|c|k|<b>");
    EXPECT_EQ(
        render(
            "{{ \"line1\\nline2\\n\\nline4\"|indent(2, first=true) }}|{{ \"a\\nb\"|indent('> ') }}|"
            "{{ \"a\\n\\nb\"|indent(2, blank=true) }}"),
        "  line1\n  line2\n\n  line4|a\n> b|a\n  \n  b");
    EXPECT_EQ(
        render("{{ x | default('d') }}|{{ nothing | default('d') }}|{{ '' | default('d') }}|"
               "{{ '' | d('d', true) }}|{{ none|default('n') }}|{{ s|count }}|{{ d|length }}|"
               "{{ d|list }}|{{ 'ab'|list }}|{{ d|items|list }}|{{ 3|string ~ 'x' }}|{{ -3|abs }}"),
        "[1]|d||d|None|5|2|['a', 'items']|['a', 'b']|[('a', 1), ('items', 5)]|3x|3");
}

TEST(Jinja, SelectRejectAndMap) {
    EXPECT_EQ(
        render("{{ [none, 0, 1, 'a', '']|select|list }}|{{ [1,2,3,4]|reject('even')|list }}|"
               "{{ [1,2,3]|select('gt', 1)|list }}|{{ [1,2,3]|select('in', [2,3])|list }}|"
               "{{ users|selectattr('active')|map(attribute='name')|join(', ') }}|"
               "{{ users|rejectattr('role', 'equalto', 'admin')|map(attribute='name')|list }}|"
               "{{ users|map(attribute='address.city', default='?')|list }}|"
               "{{ users|map(attribute='name')|map('upper')|list }}|{{ users|join('/', "
               "attribute='role') }}"),
        "[1, 'a']|[1, 3]|[2, 3]|[2, 3]|ann, cy|['bob', 'cy']|['Oslo', '?', '?']|['ANN', 'BOB', "
        "'CY']|"
        "admin/user/user");
    EXPECT_EQ(render("{{ users|selectattr('address', 'defined')|map(attribute='name')|first }}"),
              "ann");
}

TEST(Jinja, Tests) {
    EXPECT_EQ(
        render("{{ x is string }}|{{ 'a' is string }}|{{ 1 is number }}|{{ true is number }}|"
               "{{ true is integer }}|{{ 1.0 is float }}|{{ d is mapping }}|{{ l is sequence }}|"
               "{{ 'a' is sequence }}|{{ d is iterable }}|{{ 3 is divisibleby 3 }}|{{ 1 is equalto "
               "1 }}|"
               "{{ none is none }}|{{ true is true }}|{{ 1 is true }}|{{ false is boolean }}"),
        "False|True|True|True|False|True|True|True|True|True|True|True|True|True|False|True");
    EXPECT_EQ(
        render("{{ 2 is even }}|{{ 3 is odd }}|{{ 9 is divisibleby(3) }}|{{ 'a' is lower }}|"
               "{{ 'A' is upper }}|{{ [] is sequence }}|{{ 1 is iterable }}|{{ x is callable }}|"
               "{{ range is callable }}|{{ [1] is sameas [1] }}|{{ 'upper' is filter }}|{{ 'odd' "
               "is test }}|"
               "{{ 2 is in [1,2] }}|{{ 1 is not number }}|{{ 1 is lt 2 }}|{{ 1 is ge(1) }}"),
        "True|True|True|True|True|True|False|False|True|False|True|True|True|False|True|True");
    // jinja2's Undefined is iterable and a sequence, and has length 0.
    EXPECT_EQ(
        render("{{ u is sequence }}|{{ u is iterable }}|{{ u|length }}|{{ none is iterable }}|"
               "{{ u is defined }}|{{ u is undefined }}|{{ none is defined }}"),
        "True|True|0|False|False|True|True");
}

TEST(Jinja, Loops) {
    EXPECT_EQ(render("{% for x in l %}{{ loop.index }}{{ loop.revindex }}{{ loop.cycle('a','b') }}"
                     "{% if loop.last %}!{% endif %}{{ loop.nextitem }}{% endfor %}"),
              "13a222b331a!");
    EXPECT_EQ(render("{% for x in l if x > 1 %}{{ loop.index }}/{{ loop.length }} {% else "
                     "%}empty{% endfor %}|"
                     "{% for x in [] %}{% else %}E{% endfor %}"),
              "1/2 2/2 |E");
    EXPECT_EQ(
        render("{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}"
               "{% endif %}{{ x }}{% endfor %}"),
        "1");
    EXPECT_EQ(
        render(
            "{% for a in [1,2] %}{% for b in ['x','y'] %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}"
            "{{ loop.index }};{% endfor %}"),
        "11x21y1;12x22y2;");
    EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{% if not loop.last "
                     "%},{% endif %}"
                     "{% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for c in "
                     "'hé' %}[{{ c }}]"
                     "{% endfor %}|{% for a, b in [(1,2),(3,4)] %}{{ a }}{{ b }}{% endfor %}"),
              "a=1,b=2|xy|[h][é]|1234");
    EXPECT_EQ(
        render("{% for x in [1,1,2,3,3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}|"
               "{% for x in 'abc' %}{{ loop.previtem|default('^') }}{{ x }}{{ "
               "loop.nextitem|default('$') }} "
               "{% endfor %}|{% for x in [1,2,3] %}{{ loop.revindex0 }}{{ loop.length }}{{ "
               "loop.first }}"
               "{% endfor %}"),
        "123|^ab abc bc$ |23True13False03False");
    EXPECT_EQ(render("{% for x in u %}never{% endfor %}ok"), "ok");
    EXPECT_EQ(render("{% for x in none %}{% endfor %}"),
              "ERR line 1: 'NoneType' object is not iterable");
}

TEST(Jinja, ScopesAreJinjas) {
    // A loop body's `set` is gone at the next iteration and after the loop; `if` has no scope.
    EXPECT_EQ(
        render(
            "{% for i in l %}{% if loop.first %}{% set y = 1 %}{% endif %}[{{ y }}]{% endfor %}"),
        "[1][][]");
    EXPECT_EQ(render("{% set x = 0 %}{% for i in l %}{{ x }}{% set x = i %}{% endfor %}|{{ x }}"),
              "000|0");
    EXPECT_EQ(render("{% set x = 0 %}{% if true %}{% set x = 5 %}{% endif %}{{ x }}"), "5");
    EXPECT_EQ(render("{% for i in l %}{% set z = i %}{% endfor %}{{ z }}|{{ i }}"), "|");
    // namespace() is how a value leaves a loop.
    EXPECT_EQ(
        render(
            "{% set ns = namespace(total=0, items=[]) %}{% for x in [1,2,3] %}"
            "{% set ns.total = ns.total + x %}{% set ns.items = ns.items + [x * 2] %}{% endfor %}"
            "{{ ns.total }} {{ ns.items }}|{{ ns }}|{{ ns['total'] }}"),
        "6 [2, 4, 6]|<Namespace {'total': 6, 'items': [2, 4, 6]}>|6");
    // A macro reads its defining scope's names as they are when it is called.
    EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"),
              "2");
    EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}"),
              "3False");
}

TEST(Jinja, SetForms) {
    EXPECT_EQ(render("{% set x %}hello {{ 1 }}{% endset %}{{ x }}|{% set y | upper %}abc{% endset "
                     "%}{{ y }}"),
              "hello 1|ABC");
    EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set (c, d) = 'xy' %}{{ c }}{{ d }}|"
                     "{% set t = 1, 2 %}{{ t }}"),
              "12|xy|(1, 2)");
    EXPECT_EQ(render("{% set e, f = [1] %}"),
              "ERR line 1: not enough values to unpack (expected 2, got 1)");
    EXPECT_EQ(render("{% set a, b = 1 %}"), "ERR line 1: cannot unpack non-iterable int object");
    EXPECT_EQ(render("{% set x = 5 %}{% set x.y = 1 %}"),
              "ERR line 1: cannot assign attribute on non-namespace object");
    EXPECT_EQ(render("{% set ns = namespace() %}{% set ns._x = 1 %}"),
              "ERR line 1: Chat templates cannot store underscore-prefixed attributes on a "
              "namespace, but "
              "got '_x'. Please rename the attribute.");
}

TEST(Jinja, Macros) {
    EXPECT_EQ(
        render("{% macro hello(name, greeting='Hello', punct=greeting|length) %}{{ greeting }}, {{ "
               "name }}"
               "{{ '!' * punct }}{% endmacro %}{{ hello('Bob') }}|{{ hello('Al', greeting='Hi') }}|"
               "{{ hello(punct=1, name='Zed') }}"),
        "Hello, Bob!!!!!|Hi, Al!!|Hello, Zed!");
    EXPECT_EQ(
        render("{% macro f(a, b=2) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|"
               "{{ f(b=5, a=0) }}|{{ f() }}"),
        "1-2-|1-3-|0-5-|-2-");
    EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro "
                     "%}{{ f(3) }}"),
              "321");
    EXPECT_EQ(render("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% "
                     "endcall %}|"
                     "{% macro list_it(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% "
                     "endmacro %}"
                     "{% call(x) list_it([1,2]) %}<{{ x }}>{% endcall %}"),
              "[inside]|<1><2>");
    EXPECT_EQ(render("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}"),
              "ERR line 1: macro 'f' takes not more than 1 argument(s)");
    EXPECT_EQ(render("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(b=1) }}"),
              "ERR line 1: macro 'f' takes no keyword argument 'b'");
}

TEST(Jinja, WhitespaceControlAsTransformersSetsIt) {
    // trim_blocks eats the newline after a block tag, lstrip_blocks the indentation before
    // one; `+` keeps the indentation, `-` strips all whitespace on its side.
    EXPECT_EQ(render("  {% if true %}\n    text\n  {% endif %}\n    {%+ if true %}kept{% endif %}\n"
                     "{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}\n{# note #}\nend"),
              "    text\n    kept12end");
    EXPECT_EQ(render("{% if true %}\n    hi\n  {% endif %}\n  end"), "    hi\n  end");
    EXPECT_EQ(render("{%- for x in l -%}\n  {{ x }}\n{%- endfor %}"), "123");
    EXPECT_EQ(
        render("{% raw %}{{ not rendered }}{% endraw %}|{#- comment -#}  |  {{- ' x ' -}}  |"),
        "{{ not rendered }}|| x |");
    // {{ }} keeps its newline; one trailing newline of the source is dropped; \r\n reads as \n.
    EXPECT_EQ(render("{{ 1 }}\n{{ 2 }}\n"), "1\n2");
    EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
    EXPECT_EQ(render("{% generation %}gen{% endgeneration %}"), "gen");
}

TEST(Jinja, UndefinedIsJinjasDefault) {
    EXPECT_EQ(render("{{ undefined_thing }}|{% for x in undefined_thing %}x{% endfor %}|"
                     "{{ undefined_thing|length }}|{{ {'a': 1}.missing }}|{{ none.attr }}|"
                     "{{ undefined_thing is defined }}|{{ [1][5] is defined }}|{{ (undefined_thing "
                     "or 'fallback') }}|"
                     "{{ [] | first }}|{{ ([] | first) is defined }}|{{ 'a' ~ nothing ~ 'b' }}|{{ "
                     "nothing|trim }}"),
              "||0|||False|False|fallback||False|ab|");
    // Using one as a value fails with jinja2's message.
    EXPECT_EQ(render("{{ {'a': 1}.missing.deeper }}"),
              "ERR line 1: 'dict object' has no attribute 'missing'");
    EXPECT_EQ(render("{{ 1 + undefined_thing }}"), "ERR line 1: 'undefined_thing' is undefined");
    EXPECT_EQ(render("{{ undefined_thing.attr }}"), "ERR line 1: 'undefined_thing' is undefined");
    EXPECT_EQ(render("{{ 'abc' < undefined_thing }}"),
              "ERR line 1: 'undefined_thing' is undefined");
    EXPECT_EQ(render("{{ nothing() }}"), "ERR line 1: 'nothing' is undefined");
}

TEST(Jinja, MethodsAndGlobals) {
    EXPECT_EQ(
        render("{{ d.get('missing', 'dflt') }}|{{ d.get('a') }}|{{ d.keys()|list }}|{{ "
               "d.values()|list }}|"
               "{{ d['items'] }}|{{ d.items()|list }}|{{ [1,2,1].count(1) }}|{{ [1,2].index(2) }}"),
        "dflt|1|['a', 'items']|[1, 5]|5|[('a', 1), ('items', 5)]|2|1");
    EXPECT_EQ(
        render("{{ strftime_now('%Y-%m-%d %H:%M %A %b') }}|{{ dict(a=1, b='x') }}|{{ dict([('k', "
               "'v')]) }}|"
               "{{ namespace(a=1).a }}|{{ range(2, 8, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ "
               "range(3)|list }}"),
        "2025-07-26 14:30 Saturday Jul|{'a': 1, 'b': 'x'}|{'k': 'v'}|1|[2, 5]|[5, 3, 1]|[0, 1, 2]");
    // The immutable sandbox refuses methods that change a list or dict in place.
    EXPECT_EQ(render("{{ x.append(1) }}"),
              "ERR line 1: access to attribute 'append' of 'list' object is unsafe.");
    EXPECT_EQ(render("{{ d.update({}) }}"),
              "ERR line 1: access to attribute 'update' of 'dict' object is unsafe.");
    EXPECT_EQ(render("{{ raise_exception('custom failure: ' ~ 42) }}"),
              "ERR line 1: custom failure: 42");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
    EXPECT_EQ(render("{{ 1 // 0 }}"), "ERR line 1: integer division or modulo by zero");
    EXPECT_EQ(render("{{ 'a' + none }}"),
              "ERR line 1: can only concatenate str (not \"NoneType\") to str");
    EXPECT_EQ(render("{{ {'a': 1} + {'b': 2} }}"),
              "ERR line 1: unsupported operand type(s) for +: 'dict' and 'dict'");
    EXPECT_EQ(render("{{ none|length }}"), "ERR line 1: object of type 'NoneType' has no len()");
    EXPECT_EQ(render("{{ 'a' < 1 }}"),
              "ERR line 1: '<' not supported between instances of 'str' and 'int'");
    EXPECT_EQ(render("line one\n{% for m in l %}\n{% if m == 2 %}\n{{ raise_exception('bad message "
                     "' ~ m) }}\n"
                     "{% endif %}\n{% endfor %}"),
              "ERR line 4: bad message 2");
}

TEST(Jinja, ParseErrorsNameTheLineAndConstruct) {
    EXPECT_EQ(render("{{ x }}\n{{ y | frobnicate }}"), "ERR line 2: unknown filter 'frobnicate'");
    EXPECT_EQ(render("{% if x is prime %}{% endif %}"), "ERR line 1: unknown test 'prime'");
    EXPECT_EQ(render("a\n\n{% frobnicate %}"), "ERR line 3: unknown tag 'frobnicate'");
    EXPECT_EQ(render("{% include 'other.jinja' %}"), "ERR line 1: tag 'include' is not supported");
    EXPECT_EQ(
        render("{% if x %}\n{% for a in b %}\n{{ a }}\n"),
        "ERR line 3: unexpected end of template: the '{% for %}' block from line 2 is not closed");
    EXPECT_EQ(render("{% endif %}"), "ERR line 1: unexpected 'endif': no block is open");
    EXPECT_EQ(render("{% if x %}\n{% endfor %}"),
              "ERR line 2: unexpected 'endfor' inside the '{% if %}' block from line 1");
    EXPECT_EQ(render("\n{{ 1 + }}"), "ERR line 2: unexpected '}}' in an expression");
    EXPECT_EQ(render("{{ 'abc }}"), "ERR line 1: unterminated string literal");
    EXPECT_EQ(render("ok\n{{ x "), "ERR line 2: unclosed expression '{{' (no '}}')");
    EXPECT_EQ(render("{# never closed"), "ERR line 1: unclosed comment '{#'");
    EXPECT_EQ(render("{% break %}"), "ERR line 1: 'break' outside a for loop");
    EXPECT_EQ(render("{{ a | }}"), "ERR line 1: expected a filter name, got '}}'");
    EXPECT_EQ(render("{{ x $ y }}"), "ERR line 1: unexpected character '$' in a tag");
    EXPECT_EQ(render("{% for x in l recursive %}{% endfor %}"),
              "ERR line 1: recursive for loops are not supported");
}

TEST(Jinja, RunawayTemplatesAreRefused) {
    EXPECT_EQ(
        render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
        "ERR line 1: macro calls nested more than 100 deep (a macro calling itself without end?)");
    RenderOptions few;
    few.limits.max_iterations = 1000;
    EXPECT_EQ(
        render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", few),
        "ERR line 1: loops ran more than 1000 iterations in total");
    EXPECT_EQ(
        render("{{ range(200000)|length }}"),
        "ERR line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    RenderOptions small;
    small.limits.max_output_bytes = 1 << 16;
    EXPECT_EQ(render("{% for i in range(1000) %}{{ 'x' * 100 }}{% endfor %}", small),
              "ERR line 1: the rendered text would exceed 65536 bytes");
    EXPECT_EQ(
        render("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
               "{% endfor %}",
               small),
        "ERR line 1: the rendered text would exceed 65536 bytes");
    EXPECT_EQ(render("{{ 'x' * 100000000 }}", small),
              "ERR line 1: the rendered text would exceed 65536 bytes");
    // The parser refuses nesting deep enough to threaten the stack.
    const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    EXPECT_EQ(render(deep), "ERR line 1: template nested more than 200 levels deep");
    std::string blocks;
    for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
    EXPECT_EQ(render(blocks).substr(0, 48), "ERR line 1: template nested more than 200 levels");
    // So is JSON input nested past what printing it could recurse through.
    nlohmann::ordered_json v = 1;
    for (int i = 0; i < 2000; ++i) v = nlohmann::ordered_json::array({v});
    EXPECT_THROW(from_json(v), std::runtime_error);
}

TEST(Jinja, OneTemplateRendersOnManyThreads) {
    auto t =
        Template::parse("{% for m in messages %}{{ m.role }}:{{ m.content|trim }};{% endfor %}");
    ASSERT_TRUE(t.ok());
    const Template& tmpl = *t;
    std::vector<std::string> out(4);
    std::vector<std::thread> threads;
    for (size_t k = 0; k < out.size(); ++k) {
        threads.emplace_back([&, k] {
            for (int rep = 0; rep < 200; ++rep) {
                List msgs;
                Dict d;
                d.set("role", "user");
                d.set("content", " hi " + std::to_string(k) + " ");
                msgs.push_back(Value::dict(std::move(d)));
                auto r = tmpl.render({{"messages", Value::list(std::move(msgs))}});
                out[k] = r ? *r : r.error().message;
            }
        });
    }
    for (auto& th : threads) th.join();
    for (size_t k = 0; k < out.size(); ++k) EXPECT_EQ(out[k], "user:hi " + std::to_string(k) + ";");
}

// Found by a differential run against jinja2 (expected strings are jinja2 3.1.6's).
TEST(Jinja, Jinja2sFiltersFerryLacksFailOnlyWhenRun) {
    EXPECT_EQ(render("{% if false %}{{ s|wordwrap(5) }}{{ l|groupby('x') }}{% endif %}ok"), "ok");
    const std::string ran = render("{{ s|truncate(3) }}");
    EXPECT_NE(ran.find("jinja2's filter 'truncate' is not supported"), std::string::npos) << ran;
    // A name jinja2 does not know either is refused when the template loads, as jinja2 does.
    EXPECT_EQ(render("{% if false %}{{ s|no_such_filter }}{% endif %}ok"),
              "ERR line 1: unknown filter 'no_such_filter'");
}

TEST(Jinja, NumbersAsJinja2ReadsAndTestsThem) {
    EXPECT_EQ(render("{{ 2.5 is even }}|{{ 2.5 is odd }}|{{ 4.0 is even }}|{{ 3.0 is odd }}|"
                     "{{ 0.5 is divisibleby 3 }}|{{ 6.0 is divisibleby 3 }}|{{ -3 is odd }}|"
                     "{{ -3.0 is odd }}|{{ 7 is divisibleby(-2) }}"),
              "False|False|True|True|False|True|True|True|False");
    EXPECT_EQ(render("{{ -18773113910795480.0 // 3 }}|{{ 7.5 // -2 }}|{{ -0.0 // 5 }}|"
                     "{{ 0.0 // -5 }}|{{ 1e308 // 1e-308 }}"),
              "-6257704636931828.0|-4.0|-0.0|-0.0|inf");
    // INT64_MIN % -1 traps in C++; Python says 0.
    EXPECT_EQ(render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}|{{ 'truncate' is filter "
                     "}}"),
              "True|True");
    EXPECT_EQ(render("{{ 0x10 }}|{{ 0o17 }}|{{ 0b101 }}|{{ 0X_ff }}|{{ 0x1_0 }}|{{ 0B1 + 1 }}"),
              "16|15|5|255|16|2");
    EXPECT_EQ(render("{{ 0x8000000000000000 }}"),
              "ERR line 1: integer literal 0x8000000000000000 is too large");
    // Python prints all 31 digits; a 64-bit integer cannot, so it says so instead of wrapping.
    const std::string big = render("{{ '%d'|format(1e30) }}");
    EXPECT_NE(big.find("does not fit in 64 bits"), std::string::npos) << big;
}

TEST(Jinja, StrftimeNowIsANaiveDatetimeWithoutAZone) {
    EXPECT_EQ(render("{{ strftime_now('%Y %Z|%z|%%Z') }}"), "2025 ||%Z");
}

}  // namespace
}  // namespace ferry::tokenizer::jinja
