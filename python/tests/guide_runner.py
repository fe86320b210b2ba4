"""Runs docs/GUIDE.md as a user would, and compares what it prints.

The guide marks what is run with fenced blocks whose info string holds the
word ``guide``:

* ```` ```console guide ```` : a shell session. Lines starting with ``$ ``
  are commands (a trailing ``\\`` continues one on the next line); the lines
  up to the next command are its expected output, stdout and stderr
  together. Every command must exit with 0, except in a block marked
  ``fails``, whose last command must fail.
* ```` ```yaml guide file=NAME ```` (any language): the block's text is
  written to ``NAME`` in the current directory before the next command runs.

Other blocks (the install commands, fragments in the prose) are not run.
The whole guide runs in one ``bash`` process, so ``cd`` and variables carry
over, with ``HOME`` set to a fresh temporary directory (so the artifact cache
is ``~/.cache/tessera/artifacts`` inside it) and the Python environment this
runs in first on ``PATH`` (its ``python`` and the ``tessera`` command its
wheel installed).

Outputs are compared after normalizing only what must vary between runs:

* the temporary home is written ``~``;
* artifact hashes: a 64-digit hash printed where the guide printed another
  one stands for it from then on, as do its prefixes (in outputs, and in
  commands such as ``tessera head 8730acc0``);
* durations (``0.11s``, ``0s ago``) and rates (``1.7 MB/s``, ``samples/s``);
* runs of spaces (columns move when a number's width changes).

``python guide_runner.py [--update] [GUIDE]`` runs it by hand; ``--update``
writes the outputs of this run into the guide (paths as ``~``, everything
else as printed), for after a change that alters them on purpose.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

GUIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "GUIDE.md")

FENCE = re.compile(r"^([ \t]*)```(\S*)[ \t]*(.*)$")
HEX = re.compile(r"\b[0-9a-f]{8,64}\b")
FULL_HASH = re.compile(r"\b[0-9a-f]{64}\b")
PREFIX = re.compile(r"\b(?=[0-9]*[a-f])[0-9a-f]{16,63}\b")
# Durations and rates, as the CLI and the guide's scripts print them.
VARYING = [
    (re.compile(r"\b\d+(?:\.\d+)?(?:s|ms|m|h|d) ago\b"), "<age> ago"),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:(?:[kKMG]i?)?B/s|samples/s)"), "<rate>"),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms)\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?%"), "<percent>"),
]
COMMAND_TIMEOUT = 300.0


@dataclass
class Command:
    text: str            # as in the guide, continuation lines joined with "\n"
    expected: List[str]  # the output lines the guide shows
    line: int            # 1-based line of the command in the guide


@dataclass
class Block:
    kind: str                     # "console" or "file"
    start: int                    # index of the opening fence line
    end: int                      # index of the closing fence line
    indent: str = ""              # of the fence (a block inside a list item)
    fails: bool = False
    path: Optional[str] = None    # for files
    text: str = ""                # for files
    commands: List[Command] = field(default_factory=list)


def parse(lines: List[str]) -> List[Block]:
    """The guide's marked blocks, in order."""
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            i += 1
            continue
        indent, lang, words = m.group(1), m.group(2), m.group(3).split()
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != indent + "```":
            j += 1
        if j == len(lines):
            raise ValueError(f"GUIDE.md:{i + 1}: unclosed code block")
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]
        if "guide" in words:
            opts = dict(w.split("=", 1) for w in words if "=" in w)
            if "file" in opts:
                blocks.append(Block("file", i, j, indent, path=opts["file"],
                                    text="".join(l + "\n" for l in body)))
            elif lang == "console":
                blocks.append(Block("console", i, j, indent, fails="fails" in words,
                                    commands=commands_of(body, i + 2)))
            else:
                raise ValueError(f"GUIDE.md:{i + 1}: a guide block is either console or has file=NAME")
        i = j + 1
    return blocks


def commands_of(body: List[str], first_line: int) -> List[Command]:
    cmds: List[Command] = []
    k = 0
    while k < len(body):
        if not body[k].startswith("$ "):
            if not cmds:
                raise ValueError(f"GUIDE.md:{first_line + k}: output before the first command")
            cmds[-1].expected.append(body[k])
            k += 1
            continue
        text = body[k][2:]
        line = first_line + k
        while text.endswith("\\") and k + 1 < len(body):
            k += 1
            text += "\n" + body[k]
        cmds.append(Command(text, [], line))
        k += 1
    return cmds


class Shell:
    """One bash process the guide's commands run in, one after another."""

    def __init__(self, cwd: str, env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"], cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.count = 0

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, command: str) -> Tuple[int, List[str]]:
        """Runs `command` (stdin closed, stderr into stdout): exit code and lines."""
        self.count += 1
        marker = f"@@guide-{os.getpid()}-{self.count}@@"
        assert self.proc.stdin is not None
        # A block of its own so that `cd` and variables persist; a newline
        # before the marker in case the output does not end with one.
        self.proc.stdin.write(f"{{\n{command}\n}} < /dev/null 2>&1\nprintf '\\n{marker} %d\\n' $?\n")
        self.proc.stdin.flush()
        out: List[str] = []
        while True:
            try:
                line = self.lines.get(timeout=COMMAND_TIMEOUT)
            except queue.Empty:
                raise TimeoutError(f"no end after {COMMAND_TIMEOUT:.0f}s: {command}")
            if line is None:
                raise RuntimeError(f"the shell exited during: {command}\n{''.join(out)}")
            if line.startswith(marker):
                if out and out[-1] == "\n":
                    out.pop()
                elif out:
                    out[-1] = out[-1][:-1] if out[-1].endswith("\n") else out[-1]
                return int(line.split()[1]), [l.rstrip("\n") for l in out]
            out.append(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Hashes:
    """Which hash of this run stands for which hash printed in the guide."""

    def __init__(self) -> None:
        self.run_to_guide: Dict[str, str] = {}

    def learn(self, guide: List[str], run: List[str]) -> None:
        """Pairs the full hashes of one command's output, in order, then
        shorter hash prefixes (16 digits or more, with a letter) at the same
        place of the same line (`building penguins -> a4c65f3a5c0ff5b6` of a
        build that fails before printing its full hash)."""
        g = FULL_HASH.findall("\n".join(guide))
        r = FULL_HASH.findall("\n".join(run))
        if len(g) == len(r):
            for a, b in zip(r, g):
                self.run_to_guide.setdefault(a, b)
        if len(guide) == len(run):
            for gl, rl in zip(guide, run):
                gs, rs = PREFIX.findall(gl), PREFIX.findall(rl)
                if len(gs) == len(rs):
                    for a, b in zip(rs, gs):
                        if self.to_guide(a) == a:  # not known yet
                            self.run_to_guide.setdefault(a, b)

    def to_guide(self, text: str) -> str:
        def sub(m: "re.Match[str]") -> str:
            s = m.group(0)
            for run, guide in self.run_to_guide.items():
                if run.startswith(s):
                    return guide[:len(s)]
            return s
        return HEX.sub(sub, text)

    def to_run(self, text: str) -> str:
        def sub(m: "re.Match[str]") -> str:
            s = m.group(0)
            for run, guide in self.run_to_guide.items():
                if guide.startswith(s):
                    return run[:len(s)]
            return s
        return HEX.sub(sub, text)


def normalize(line: str) -> str:
    for pattern, repl in VARYING:
        line = pattern.sub(repl, line)
    return re.sub(r"\s+", " ", line).strip()


@dataclass
class Mismatch:
    line: int
    command: str
    detail: str

    def __str__(self) -> str:
        return f"GUIDE.md:{self.line}: $ {self.command}\n{self.detail}"


def run_guide(path: str = GUIDE, update: bool = False) -> List[Mismatch]:
    """Runs the guide; returns what differs (and rewrites it with --update)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = parse(lines)
    if not any(b.kind == "console" for b in blocks):
        raise ValueError(f"{path}: no `console guide` block")
    mismatches: List[Mismatch] = []
    new_outputs: Dict[int, List[str]] = {}  # block start -> new body
    tmp = tempfile.mkdtemp(prefix="tessera-guide-")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TESSERA_CACHE_DIR", "XDG_CACHE_HOME", "TESSERA_BIN", "CDPATH", "PYTHONPATH")}
    env["HOME"] = home
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["COLUMNS"] = "100"
    shell = Shell(home, env)
    hashes = Hashes()
    try:
        for b in blocks:
            if b.kind == "file":
                rc, out = shell.run(f"cat > {b.path} <<'GUIDE_FILE_END'\n{b.text}GUIDE_FILE_END")
                if rc != 0:
                    raise RuntimeError(f"GUIDE.md:{b.start + 1}: writing {b.path}: {out}")
                continue
            body: List[str] = []
            for n, c in enumerate(b.commands):
                rc, out = shell.run(hashes.to_run(c.text))
                out = [l.replace(home, "~") for l in out]
                hashes.learn(c.expected, out)
                shown = [hashes.to_guide(l) for l in out]
                must_fail = b.fails and n == len(b.commands) - 1
                if (rc != 0) != must_fail:
                    mismatches.append(Mismatch(c.line, c.text, (
                        f"exit code {rc}, expected {'non-zero' if must_fail else '0'}; it printed:\n"
                        + "\n".join(out))))
                got = [normalize(l) for l in shown]
                want = [normalize(l) for l in c.expected]
                if got != want:
                    mismatches.append(Mismatch(c.line, c.text, diff(want, got)))
                # --update writes this run's hashes, in commands too.
                body.append(b.indent + "$ " + hashes.to_run(c.text))
                body.extend(b.indent + l if l else l for l in out)
            new_outputs[b.start] = body
    finally:
        shell.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if update:
        out_lines: List[str] = []
        i = 0
        by_start = {b.start: b for b in blocks}
        while i < len(lines):
            if i in new_outputs:
                out_lines.append(lines[i])
                out_lines.extend(new_outputs[i])
                i = by_start[i].end
            out_lines.append(lines[i])
            i += 1
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(out_lines))
    return mismatches


def diff(want: List[str], got: List[str]) -> str:
    import difflib
    return "\n".join(difflib.unified_diff(want, got, "GUIDE.md", "this run", lineterm="", n=2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="write this run's outputs into the guide")
    ap.add_argument("guide", nargs="?", default=GUIDE)
    args = ap.parse_args()
    problems = run_guide(args.guide, update=args.update)
    for p in problems:
        print(p, end="\n\n")
    if args.update:
        print(f"updated {args.guide}")
        return 0
    print(f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
