# The set forms TestSetForms / TestSetRefused check, rendered by jinja2 (what
# transformers uses); output recorded in set_jinja.out.

from jinja2.sandbox import ImmutableSandboxedEnvironment
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
msgs=[{"role":"user","content":"x"}]
ok = [
 '{% set x = 1 if false else 2 %}{{ x }}',
 '{% set x = 1 if false %}[{{ x }}]',
 '{% set a, b = 1, 2 %}{{ a }}{{ b }}',
 '{% set (a, b) = [3, 4] %}{{ b }}{{ a }}',
 '{% set a, (b, c) = [1, "yz"] %}{{ a }}{{ c }}{{ b }}',
 '{% set a, b = "xy" %}{{ b }}',
 '{% set a, = [7] %}{{ a }}',
 '{% set t = 1, 2 %}{{ t|length }}{{ t[1] }}',
 '{% set x %}a{{ 1 }}b{% endset %}{{ x }}',
 '{% set x -%} a {%- endset %}[{{ x }}]',
 '{% set ns = namespace(s=1) %}{% set ns.s %}b{% endset %}{{ ns.s }}',
 '{% set ns = namespace(a=1) %}{% set l = [ns] %}{% for n in l %}{% set n.a = 2 %}{% endfor %}{{ ns.a }}',
 '{% set ns = namespace(a=1) %}{% set o = namespace(b=ns) %}{% set x = o.b %}{% set x.a = 3 %}{{ ns.a }}',
 '{% set ns = namespace(a=1) %}{% set p, q = ns, 1 %}{% set p.a = 5 %}{{ ns.a }}',
 '{% for m in messages %}{% set r = m.role %}{% endfor %}[{{ r }}]',
 '{% set d = {"a": 1} %}{% set d.a = 2 %}',
 '{% set m = messages[0] %}{% set m.role = "x" %}',
 '{% set a, b = [1, 2, 3] %}',
 '{% set a, b = 5 %}',
 '{% set true = 1 %}',
 '{% set ns.a.b = 1 %}',
 '{% set x[0] = 1 %}',
 '{% set () = 1 %}',
]
for s in ok:
    try:
        print(repr(s), '->', repr(env.from_string(s).render(messages=msgs)))
    except Exception as e:
        print(repr(s), '-> ERR', type(e).__name__, e)
