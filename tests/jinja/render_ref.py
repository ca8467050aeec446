"""Renders a chat template with Python's jinja2 as transformers does, once
per vars file: python3 render_ref.py TEMPLATE VARS.json... prints a JSON list
of {"text": ...} or {"error": ...}, one per vars file."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformers_env import env

template = env().from_string(open(sys.argv[1], encoding="utf-8").read())
out = []
for path in sys.argv[2:]:
    try:
        out.append({"text": template.render(**json.load(open(path, encoding="utf-8")))})
    except Exception as e:  # a template that rejects the conversation
        out.append({"error": str(e)})
print(json.dumps(out))
