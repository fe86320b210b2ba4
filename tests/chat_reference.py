"""Reference renderings for tests/chat.rs: the chat templates that the TRL
package ships, rendered by jinja2 set up as Hugging Face transformers'
`apply_chat_template` sets it up (sandboxed, trim_blocks and lstrip_blocks,
loop controls, `raise_exception`, a `tojson` filter over `json.dumps` with
`ensure_ascii=False`). No clock function (`strftime_now`): tessera's
rendering has none, so that builds are reproducible.

Reads {"conversations": [[[role, content], ...], ...], "bos": s, "eos": s}
on stdin and writes, for every template, its source and, for every
conversation and both values of add_generation_prompt, the text or the
error. For the `_training` templates it also writes the UTF-8 byte ranges
that their `{% generation %}` blocks cover (as transformers records them
for `return_assistant_tokens_mask`).
"""

import importlib.util
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: records where its output
    lands in the rendered text."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        self.blocks = None
        self.spans = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_mark", [])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _mark(self, caller):
        out = caller()
        if self.blocks is not None:
            start = len("".join(self.blocks))
            self.spans.append((start, start + len(out)))
        return out


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def byte_offset(text, i):
    return len(text[:i].encode("utf-8"))


def main():
    request = json.load(sys.stdin)
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("chat_reference.py: the trl package is not installed (scripts/setup.sh --test installs it)")
    folder = os.path.join(list(spec.submodule_search_locations)[0], "chat_templates")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".jinja"))
    templates = []
    for name in names:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            source = f.read()
        env = environment()
        ext = next(e for e in env.extensions.values() if isinstance(e, Generation))
        entry = {"name": name, "source": source, "renders": [], "generation": []}
        try:
            template = env.from_string(source)
        except jinja2.TemplateError as e:
            entry["parse_error"] = str(e)
            templates.append(entry)
            continue
        for messages in request["conversations"]:
            msgs = [{"role": r, "content": c} for r, c in messages]
            for add in (False, True):
                try:
                    text = template.render(
                        messages=msgs, add_generation_prompt=add, bos_token=request["bos"], eos_token=request["eos"]
                    )
                    entry["renders"].append({"text": text})
                except Exception as e:  # the template's own errors, as transformers surfaces them
                    entry["renders"].append({"error": f"{type(e).__name__}: {e}"})
            if name.endswith("_training.jinja"):
                blocks, spans = [], []
                ext.blocks, ext.spans = blocks, spans
                try:
                    for piece in template.generate(
                        messages=msgs, add_generation_prompt=False, bos_token=request["bos"], eos_token=request["eos"]
                    ):
                        blocks.append(piece)
                    text = "".join(blocks)
                    entry["generation"].append(
                        {"text": text, "ranges": [[byte_offset(text, s), byte_offset(text, e)] for s, e in spans]}
                    )
                except Exception as e:
                    entry["generation"].append({"error": f"{type(e).__name__}: {e}"})
                finally:
                    ext.blocks, ext.spans = None, None
        templates.append(entry)
    json.dump({"jinja2": jinja2.__version__, "templates": templates}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
