"""The Jinja environment transformers renders chat templates in
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
tojson, raise_exception, strftime_now), with strftime_now pinned to a fixed
time so renderings are reproducible."""
import json, datetime, jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = lambda f: datetime.datetime.fromtimestamp(1700000000).strftime(f)
    return e
