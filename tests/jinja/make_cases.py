"""Remakes tests/jinja/cases.inc: each template rendered by Python's jinja2 in
the environment transformers renders chat templates in.
Run: python3 tests/jinja/make_cases.py > tests/jinja/cases.inc"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformers_env import env
E = env()
V = {"messages": [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "  Hi there \n"},
                  {"role": "assistant", "content": "<think>hmm</think>\n\nHello ü!"}],
     "tools": [{"type": "function", "function": {"name": "get", "description": "Get \"x\"\n", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
     "n": 7, "f": 2.5, "s": "héllo wörld", "flag": True}
cases = [
 # whitespace control
 "a\n  {% if true %}\n  b\n  {% endif %}\nc",
 "a {{- ' b ' -}} c\n{%- if true -%}  d  {%- endif %}",
 "x\n  {%+ if true %}y{% endif %}\n{# c #}\nz",
 "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}",
 "{% raw %}{{ x }}{% endraw %}",
 # loops
 "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
 "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %}",
 "{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
 "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}{% for x in [] %}{% else %}none{% endfor %}",
 "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
 "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.cycle('<', '>') }}{{ a }}{{ b }}{% endfor %}{% endfor %}",
 "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{% endfor %}",
 # set / namespace
 "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} {{ ns.n }}",
 "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}  {{ a + b }} {% endset %}[{{ c }}]",
 # macros / call / filter blocks
 "{% macro m(a, b='B') %}{{ a }}-{{ b }}-{{ varargs }}-{{ kwargs }}{% endmacro %}{{ m(1) }} {{ m(1, 2, 3) }} {{ m(b=5, a=4, z=6) }}",
 "{% macro wrap(t) %}[{{ caller(t) }}]{% endmacro %}{% call(x) wrap('C') %}in{{ x }}{% endcall %}",
 "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
 "{% filter upper %}a{{ 'b' }}{% endfilter %}{% filter trim | title %}  x y  {% endfilter %}",
 # expressions
 "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ 'ab' * 3 }} {{ 1 ~ 'x' ~ none }} {{ -n }} {{ n - f }}",
 "{{ [1, 2, 3][::-1] }} {{ [1, 2, 3, 4, 5][1:4:2] }} {{ s[1:3] }} {{ s[-3:] }} {{ s[::-1] }} {{ s[0] }} {{ s[-1] }} {{ messages[-1].role }}",
 "{{ {'a': 1, 'b': [true, none, 1.25]} }} {{ 'it\\'s' }} {{ [\"a'b\"] }} {{ (1, 2) }} {{ (1,) }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1.0 }} {{ 1e17 }} {{ 0.00001 }}",
 "{{ 'x' if false }}|{{ 'a' if true else 'b' }}|{{ none is none }}|{{ foo is defined }}|{{ foo is not defined }}|{{ 3 is divisibleby 3 }}|{{ 'abc' is string }}|{{ n is number }}|{{ messages is iterable }}|{{ {} is mapping }}|{{ flag is true }}|{{ 1 is odd }}",
 "{{ not flag }} {{ flag and n }} {{ 0 or 'z' }} {{ 1 in [1, 2] }} {{ 'a' not in 'bcd' }} {{ 'y' in {'y': 1} }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ n >= 7 }}",
 "{{ 'a' 'b' }} {{ \"q\\\"q\" }} {{ 'tab\\tnl\\n' }}",
 # filters
 "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ s | upper }}|{{ 'ABC' | lower }}|{{ 'hello wOrld-foo' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aXa' | replace('a', 'b') }}",
 "{{ messages | length }} {{ s | length }} {{ messages | map(attribute='role') | join(', ') }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'in', ['user', 'system']) | map(attribute='role') | first }}",
 "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) | first }} {{ messages | sort(attribute='role') | map(attribute='role') | list }} {{ {'b': 1, 'a': 2} | dictsort }} {{ [1, 2, 3, 4, 5] | batch(2) | list }}",
 "{{ [1, 1, 2, 'a', 'A'] | unique | list }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 3.14159 | round(2) }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 7 | string }} {{ [1, 2] | last }} {{ undefinedvar | default('dflt') }} {{ '' | default('e', true) }}",
 "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\nb' | indent('>>') }}|{{ 'one two  three' | wordcount }}|{{ [1, 2, 3] | sum }} {{ [1, 3, 2] | max }} {{ [1, 3, 2] | min }} {{ 'abc' | list }} {{ [1, 2] | reverse | list }}",
 "{{ tools | tojson }}\n{{ tools | tojson(indent=2) }}\n{{ {'b': 1, 'a': [1, 2.5, none, true]} | tojson(sort_keys=true) }}\n{{ 'ü<>&\\'' | tojson }}\n{{ {'a': 1} | tojson(separators=(',', ':')) }}",
 "{{ messages[0] | items | list }} {{ {'a': 1}.items() | list }} {{ messages | map('string') | list | length }} {{ ['a', 'b'] | map('upper') | join }} {{ [none, 1, 0, 2] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }}",
 # methods
 "{{ 'a,b,c'.split(',') }} {{ 'a b  c '.split() }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a,b,c'.split(',', 1) }} {{ ' x '.strip() }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'xxhixx'.rstrip('x') }} {{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }}",
 "{{ 'ABC'.lower() }} {{ 'abc'.upper() }} {{ 'a-b'.replace('-', '+') }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ messages[0].get('content') }} {{ messages[0].get('nope', 'dflt') }} {{ messages[0].get('nope') }} {{ messages[0].keys() | list }} {{ messages[0].values() | list }}",
 "{{ messages[2].content.split('</think>')[-1].lstrip('\\n') }} {{ messages[2].content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
 "{{ ', '.join(['a', 'b']) }} {{ 'abcb'.find('b') }} {{ 'abcb'.count('b') }} {{ '123'.isdigit() }}",
 # tool-call arguments as Qwen3.5 and Qwen3.6 write them: a value's string, or its JSON
 "{% for k, v in {'s': 'x y', 'i': 2, 'f': 0.5, 't': true, 'z': none, 'l': ['a', 1], 'd': {'u': 'c'}} | items %}{% set a = v | tojson | safe if v is mapping or (v is sequence and v is not string) else v | string %}{% set b = v | string if v is string else v | tojson | safe %}<{{ k }}={{ a }}|{{ b }}>{% endfor %}",
 # globals
 "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ strftime_now('%Y-%m-%d') }} {{ dict(a=1) }}",
]
out = []
for t in cases:
    r = E.from_string(t).render(**V)
    out.append((t, r))
def cstr(s):
    b = s.encode()
    res = '"'
    for ch in b:
        c = chr(ch)
        if c == '"': res += '\\"'
        elif c == '\\': res += '\\\\'
        elif c == '\n': res += '\\n'
        elif c == '\t': res += '\\t'
        elif ch < 32 or ch >= 127: res += '\\%03o' % ch
        else: res += c
    return res + '"'
print("/* Generated by rendering each template with Python's jinja2 configured as transformers configures it. */")
print("static const char *const VARS_JSON =", cstr(json.dumps(V, ensure_ascii=False)) + ";")
print("static const struct { const char *tpl, *want; } CASES[] = {")
for t, r in out:
    print("    {" + cstr(t) + ",\n     " + cstr(r) + "},")
print("};")
