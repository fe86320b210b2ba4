"""Writing tessera specs for the corpus and running the tessera CLI on them.

Each query is built in three cuttings of its cut table (the fact table, or
the hive table for hive queries):

  many         the default: fact (and fcsv, fjson) as 5 files, events with 3
               files per partition
  one          the same rows as 1 file (1 file per partition for events)
  one_chunked  `one` plus the top-level spec key `chunks: { target_bytes }`,
               so the build cuts the file into row-group ranges

and with several thread counts. Every build gets a fresh cache directory:
the thread count is not part of the artifact hash, so a shared cache would
hand back the first build's artifact and prove nothing.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from corpus import F, Q
from datagen import Inputs
from shardset import ShardSet, read_shard_set

VARIANTS = ("many", "one", "one_chunked")
SHARD_TARGET = "64KiB"
# About one of the fact file's row groups (about 100 KB each); 30 to 50
# byte ranges of the single CSV and NDJSON files.
CHUNK_TARGET = "128KiB"


def yq(s: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(s)


def ynum(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class SourceDecl:
    path: str
    format: Optional[str] = None
    chunk: bool = False

    def yaml(self) -> str:
        parts = [f"path: {yq(self.path)}"]
        if self.format:
            parts.append(f"format: {self.format}")
        if self.chunk:
            parts.append("chunk: true")
        return "{ " + ", ".join(parts) + " }"


def field_yaml(f: F) -> str:
    parts = [f"dtype: {f.dtype}"]
    if f.expr is not None:
        parts.append(f"expr: {yq(f.expr)}")
    else:
        parts.append(f"column: {yq(f.source_column)}")
    if f.fill_null is not None:
        parts.append(f"fill_null: {ynum(f.fill_null)}")
    if f.length is not None:
        parts.append(f"length: {f.length}")
    if f.pad is not None:
        parts.append(f"pad: {ynum(f.pad)}")
    if f.hash is not None:
        parts.append(f"transform: {{ hash_bucket: {f.hash} }}")
    elif f.standardize:
        parts.append("transform: standardize")
    return "{ " + ", ".join(parts) + " }"


def spec_text(name: str, q: Q, sources: Mapping[str, SourceDecl], chunk_target: Optional[str]) -> str:
    lines = ["version: 1", f"name: {name}", "sources:"]
    for t, decl in sources.items():
        lines.append(f"  {t}: {decl.yaml()}")
    lines.append(f"query: {yq(q.sql)}")
    if q.filter:
        lines.append(f"filter: {yq(q.filter)}")
    lines.append("fields:")
    for f in q.fields:
        lines.append(f"  {f.name}: {field_yaml(f)}")
    if q.split is not None:
        w = ", ".join(f"{n}: {ynum(x)}" for n, x in q.split.weights)
        lines.append(f"split: {{ key: {yq(q.split.key)}, weights: {{ {w} }} }}")
    if q.shuffle is not None:
        lines.append(f"order: {{ shuffle_seed: {q.shuffle} }}")
    lines.append(f"shards: {{ target_bytes: {SHARD_TARGET} }}")
    if chunk_target is not None:
        lines.append(f"chunks: {{ target_bytes: {chunk_target} }}")
    return "\n".join(lines) + "\n"


def corpus_sources(q: Q, inputs: Inputs, variant: str) -> Dict[str, SourceDecl]:
    layout = "5" if variant == "many" else "1"
    events_layout = "3" if variant == "many" else "1"
    cut = q.cut_table
    out: Dict[str, SourceDecl] = {}
    for t in q.tables:
        if t == "fact":
            out[t] = SourceDecl(str(inputs.fact_dir(layout) / "*.parquet"), chunk=cut == "fact")
        elif t == "events":
            out[t] = SourceDecl(str(inputs.events_dir(events_layout)), format="parquet", chunk=cut == "events")
        elif t == "fcsv":
            out[t] = SourceDecl(str(inputs.table_dir("fcsv", layout) / "*.csv"), chunk=cut == t)
        elif t == "fcsvq":
            out[t] = SourceDecl(str(inputs.table_dir("fcsvq", layout) / "*.csv"), chunk=cut == t)
        elif t == "fjson":
            out[t] = SourceDecl(str(inputs.table_dir("fjson", layout) / "*.jsonl"), chunk=cut == t)
        elif t == "dimk":
            out[t] = SourceDecl(str(inputs.dimk))
        elif t == "dimc":
            out[t] = SourceDecl(str(inputs.dimc))
        elif t == "dimu":
            out[t] = SourceDecl(str(inputs.dimu))
        else:
            raise ValueError(t)
    return out


def duck_views(inputs: Inputs) -> Dict[str, str]:
    """The same inputs for DuckDB (the default cutting: the oracle's answer
    does not depend on how files are cut)."""

    def lit(p: Path) -> str:
        return "'" + str(p).replace("'", "''") + "'"

    fact_files = sorted(inputs.fact_dir("5").glob("*.parquet"))
    csv_files = sorted(inputs.table_dir("fcsv", "5").glob("*.csv"))
    json_files = sorted(inputs.table_dir("fjson", "5").glob("*.jsonl"))
    csvq_files = sorted(inputs.table_dir("fcsvq", "5").glob("*.csv"))
    return {
        "fcsvq": "read_csv([" + ", ".join(lit(p) for p in csvq_files) + "], header = true)",
        "fcsv": "read_csv([" + ", ".join(lit(p) for p in csv_files) + "], header = true)",
        "fjson": "read_json([" + ", ".join(lit(p) for p in json_files) + "], format = 'newline_delimited')",
        "fact": "read_parquet([" + ", ".join(lit(p) for p in fact_files) + "])",
        "dimk": f"read_parquet({lit(inputs.dimk)})",
        "dimc": f"read_csv({lit(inputs.dimc)}, header = true)",
        "dimu": f"read_json({lit(inputs.dimu)}, format = 'newline_delimited')",
        "events": f"read_parquet({lit(inputs.events_dir('3') / '**' / '*.parquet')}, hive_partitioning = true, "
                  "hive_types_autocast = false)",
    }


class BuildFailed(AssertionError):
    pass


@dataclass
class Build:
    spec: Path
    threads: int
    report: Dict[str, Any]
    shards: ShardSet


def run_build(binary: str, spec: Path, threads: int, cache_dir: Path, extra: Tuple[str, ...] = (),
              timeout: float = 900) -> Build:
    # --allow-empty: the corpus has queries whose answer is empty on purpose.
    cmd = [binary, "build", str(spec), "--json", "--threads", str(threads), "--cache-dir", str(cache_dir), "-q",
           "--allow-empty", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise BuildFailed(f"tessera build failed (exit {proc.returncode}) for {spec.name} "
                          f"--threads {threads}:\n{proc.stderr.strip()[-3000:]}")
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as e:
        raise BuildFailed(f"tessera build --json printed no JSON object: {proc.stdout[-2000:]!r}") from e
    return Build(spec, threads, report, read_shard_set(Path(report["path"])))


@dataclass
class Builder:
    """Builds corpus queries, each (query, variant, threads) once per session."""

    binary: str
    inputs: Inputs
    workdir: Path
    _done: Dict[Tuple[str, str, int], Build] = field(default_factory=dict, repr=False)
    _failed: Dict[Tuple[str, str, int], BuildFailed] = field(default_factory=dict, repr=False)

    def spec_path(self, q: Q, variant: str) -> Path:
        if variant not in VARIANTS:
            raise ValueError(variant)
        d = self.workdir / "specs"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{q.id}-{variant}.yaml"
        text = spec_text(f"diff-{q.id}-{variant}", q, corpus_sources(q, self.inputs, variant),
                         CHUNK_TARGET if variant == "one_chunked" else None)
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
        return p

    def get(self, q: Q, variant: str = "many", threads: int = 2) -> Build:
        key = (q.id, variant, threads)
        if key in self._failed:
            raise self._failed[key]
        if key not in self._done:
            cache = self.workdir / "cache" / f"{q.id}-{variant}-t{threads}"
            try:
                self._done[key] = run_build(self.binary, self.spec_path(q, variant), threads, cache)
            except BuildFailed as e:
                self._failed[key] = e
                raise
        return self._done[key]


def fingerprint_diff(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            va, vb = a.get(k), b.get(k)
            if isinstance(va, list) and isinstance(vb, list):
                out.append(f"{k}: {len(va)} vs {len(vb)} entries" + (
                    "" if len(va) != len(vb) else
                    f", first difference at {next(i for i, (x, y) in enumerate(zip(va, vb)) if x != y)}"))
            else:
                out.append(f"{k}: {str(va)[:200]} vs {str(vb)[:200]}")
    return out


# ------------------------------------------------------------ staged builds
def run(cmd: List[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{' '.join(cmd[1:3])} failed:\n{p.stderr[-3000:]}"
    return p.stdout


def artifact_digests(path: Path) -> Dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir()) if not f.name.startswith(".")}


def run_plan_in_random_order(binary: str, plan_file: Path, tasks: List[Dict[str, Any]], seed: int) -> int:
    """Runs the plan's tasks by their dependencies in a random order, in
    random groups of one to three per process; repeats a few stage tasks.
    Returns how many task runs there were."""
    rng = random.Random(seed)
    finished: Set[str] = set()
    runs = 0
    while len(finished) < len(tasks):
        ready = [t["id"] for t in tasks if t["id"] not in finished and all(d in finished for d in t.get("after", []))]
        assert ready, f"no task can run: {tasks}"
        rng.shuffle(ready)
        while ready:
            group = ready[: rng.randint(1, 3)]
            ready = ready[len(group) :]
            run([binary, "task", str(plan_file), *group])
            runs += len(group)
            again = [g for g in group if g.startswith("stage") and rng.random() < 0.3]
            if again:
                run([binary, "task", str(plan_file), *again])
                runs += len(again)
            finished.update(group)
    return runs



def run_staged(binary: str, spec: Path, partitions: int, tmp: Path, local_report: Dict[str, Any], seed: int) -> Dict[str, Any]:
    """Builds ``spec`` as a cluster would (`tessera plan` with ``partitions``
    partitions, every task in its own process in a random order, `tessera
    commit`) and checks the artifact equals the local build's, file by
    file. Returns the plan."""
    plan = json.loads(
        run([binary, "plan", str(spec), "--json", "--threads", str(partitions), "--cache-dir", str(tmp / "cache"), "--work-dir", str(tmp / "work")]).strip().splitlines()[-1]
    )
    assert plan["hash"] == local_report["hash"]
    staged = plan.get("staged")
    kinds = {t["kind"] for t in plan["tasks"]}
    if staged is None:
        # One query task: the plan says why, and has no stage task.
        assert plan.get("unstaged"), plan
        assert kinds == {"global"}, kinds
    else:
        assert staged["partitions"] == partitions
        assert "stage" in kinds and staged["stages"], staged
    run_plan_in_random_order(binary, tmp / "work" / "plan.json", plan["tasks"], seed)
    report = json.loads(run([binary, "commit", str(tmp / "work" / "plan.json"), "--json", "--allow-empty"]).strip().splitlines()[-1])
    assert report["hash"] == local_report["hash"]
    got, want = artifact_digests(Path(report["path"])), artifact_digests(Path(local_report["path"]))
    assert got == want, f"{spec.name}: files differ: {sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))}"
    return plan
