"""Reference renderer for ft::jinja's tests: Python jinja2 configured exactly as transformers configures it.

Usage:
  render_ref.py list-real OUT.json         -> {name: template} of real models' chat templates shipped by the pinned
                                              packages chat-bricks and llm-templates (read with `ast`, not imported)
  render_ref.py render IN.json OUT.json     -> renders every case of IN.json

A case is {"id", "template", "mode", "now", ...}:
  mode "chat":  transformers' render_jinja_template(conversations=[messages], tools, documents, chat_template,
                return_assistant_tokens_mask=True, add_generation_prompt, **extra)
  mode "raw":   the compiled template (transformers' environment) rendered with "context" as keyword arguments,
                with the AssistantTracker active.
Result per case: {"id", "ok", "text", "spans" (UTF-8 byte offsets), "error_type", "error"}.
"""

import ast
import datetime
import importlib.util
import json
import os
import sys


def list_real(out_path):
    found = {}
    for pkg in ("chat_bricks", "llm_templates"):
        spec = importlib.util.find_spec(pkg)
        if spec is None:
            continue
        root = spec.submodule_search_locations[0]
        for dirpath, _, files in os.walk(root):
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                tree = ast.parse(open(path, encoding="utf-8").read())
                n = 0
                for node in ast.walk(tree):
                    value = None
                    if isinstance(node, ast.keyword) and node.arg == "chat_template":
                        value = node.value
                    elif isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id in ("template_str", "chat_template") for t in node.targets
                    ):
                        value = node.value
                    if isinstance(value, ast.Constant) and isinstance(value.value, str) and "{%" in value.value:
                        rel = os.path.relpath(path, root).replace(os.sep, "/")
                        found[f"{pkg}/{rel}#{n}"] = value.value
                        n += 1
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(found, fh, ensure_ascii=False)


def byte_spans(text, spans):
    return [[len(text[:s].encode("utf-8")), len(text[:e].encode("utf-8"))] for s, e in spans]


def render(in_path, out_path):
    from transformers.utils import chat_template_utils as ctu

    cases = json.load(open(in_path, encoding="utf-8"))
    results = []
    for case in cases:
        res = {"id": case["id"], "ok": False, "text": "", "spans": [], "error_type": "", "error": ""}
        try:
            compiled = ctu._compile_jinja_template(case["template"])
            now = case.get("now")
            if now is not None:
                fixed = datetime.datetime.fromtimestamp(now)
                compiled.environment.globals["strftime_now"] = lambda fmt, _d=fixed: _d.strftime(fmt)
            if case["mode"] == "chat":
                rendered, indices = ctu.render_jinja_template(
                    conversations=[case["messages"]],
                    tools=case.get("tools"),
                    documents=case.get("documents"),
                    chat_template=case["template"],
                    return_assistant_tokens_mask=True,
                    add_generation_prompt=case.get("add_generation_prompt", False),
                    **case.get("extra", {}),
                )
                text, spans = rendered[0], indices[0]
            else:
                blocks, spans = [], []
                with compiled.environment.activate_tracker(blocks, spans):
                    for block in compiled.generate(**case.get("context", {})):
                        blocks.append(block)
                    text = "".join(blocks)
            res.update(ok=True, text=text, spans=byte_spans(text, spans))
        except Exception as e:  # noqa: BLE001 - every failure is part of the reference
            res.update(error_type=type(e).__name__, error=str(e))
        results.append(res)
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, ensure_ascii=False)


if __name__ == "__main__":
    if sys.argv[1] == "list-real":
        list_real(sys.argv[2])
    else:
        render(sys.argv[2], sys.argv[3])
