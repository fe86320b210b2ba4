"""docs/GUIDE.md, run as written: its commands against the installed wheel
(the `tessera` command beside this interpreter, `import tessera`), its
outputs compared with what they print now (guide_runner.py says what is
normalized). Plus checks that the runner itself notices what it must."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import List

import pytest

import guide_runner


def write_guide(tmp_path: "os.PathLike[str]", text: str) -> str:
    path = os.path.join(str(tmp_path), "GUIDE.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_the_guide_runs_and_prints_what_it_shows() -> None:
    for module in ("torch", "palmerpenguins"):
        assert importlib.util.find_spec(module), (
            f"the guide needs {module}; scripts/setup.sh --test installs it")
    here = os.path.dirname(sys.executable)
    assert os.access(os.path.join(here, "tessera"), os.X_OK), (
        f"no tessera command in {here}: install the wheel (scripts/test-python.sh does)")
    with open(guide_runner.GUIDE, encoding="utf-8") as f:
        blocks = guide_runner.parse(f.read().split("\n"))
    commands = [c.text for b in blocks for c in b.commands]
    # The guide's path from the CSV to a resumed training run is all there.
    for needle in ("tessera explain", "tessera build", "tessera inspect", "tessera head",
                   "python train.py", "--resume"):
        assert any(needle in c for c in commands), f"the guide runs no {needle!r}"
    assert {b.path for b in blocks if b.kind == "file"} >= {"penguins.yaml", "peek.py", "train.py"}

    problems = guide_runner.run_guide()
    assert not problems, (
        "\n\n".join(map(str, problems))
        + "\n\nIf the change is intended, rewrite the outputs: python python/tests/guide_runner.py --update")


def test_the_runner_reports_a_changed_output_and_a_wrong_exit_code(tmp_path: "os.PathLike[str]") -> None:
    path = write_guide(tmp_path, "\n".join([
        "```console guide",
        "$ echo one; echo two >&2",
        "one",
        "two",
        "$ echo changed",
        "unchanged",
        "```",
        "",
        "```console guide fails",
        "$ true",
        "```",
        "",
        "```console guide",
        "$ false",
        "```",
        "",
    ]))
    problems: List[guide_runner.Mismatch] = guide_runner.run_guide(path)
    assert [p.command for p in problems] == ["echo changed", "true", "false"], problems
    assert "+changed" in problems[0].detail and "-unchanged" in problems[0].detail
    assert "expected non-zero" in problems[1].detail
    assert "exit code 1, expected 0" in problems[2].detail


def test_the_runner_writes_files_keeps_the_directory_and_maps_hashes(tmp_path: "os.PathLike[str]") -> None:
    # The "guide" shows one hash; this run prints another (the digest of a
    # file with the run's own temporary path in it). The later command uses
    # the guide's prefix and must get the run's. A 16-digit prefix printed
    # alone stands for the guide's as well.
    guide_hash = "ab" * 32
    path = write_guide(tmp_path, "\n".join([
        "```text guide file=note.txt",
        "hello",
        "```",
        "",
        "```console guide",
        "$ mkdir sub && cd sub && pwd > where && cat ../note.txt",
        "hello",
        "$ pwd",
        "~/sub",
        "$ H=$(sha256sum where | cut -c1-64); mkdir $H; echo hash: $H; echo took 0.52s at 3.1 MB/s",
        f"hash: {guide_hash}",
        "took 9.99s at 12 MB/s",
        f"$ ls -d {guide_hash[:8]}* | cut -c1-12",
        guide_hash[:12],
        "$ echo building x '->' $( (pwd; echo x) | sha256sum | cut -c1-16)",
        "building x -> " + "cd" * 8,
        "```",
        "",
    ]))
    problems = guide_runner.run_guide(path)
    assert problems == [], "\n".join(map(str, problems))

    # The same with an output that differs beyond what is normalized.
    with open(path, encoding="utf-8") as f:
        text = f.read()
    write_guide(tmp_path, text.replace("took 9.99s", "took 9.99s and more"))
    assert [p.command.split(";")[0] for p in guide_runner.run_guide(path)] == ["H=$(sha256sum where | cut -c1-64)"]


def test_update_rewrites_the_outputs(tmp_path: "os.PathLike[str]") -> None:
    path = write_guide(tmp_path, "intro\n\n```console guide\n$ echo new\nold\n```\n\nend\n")
    assert len(guide_runner.run_guide(path)) == 1
    guide_runner.run_guide(path, update=True)
    with open(path, encoding="utf-8") as f:
        assert f.read() == "intro\n\n```console guide\n$ echo new\nnew\n```\n\nend\n"
    assert guide_runner.run_guide(path) == []


def test_a_guide_block_of_unknown_form_is_an_error(tmp_path: "os.PathLike[str]") -> None:
    path = write_guide(tmp_path, "```python guide\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="either console or has file=NAME"):
        guide_runner.run_guide(path)
