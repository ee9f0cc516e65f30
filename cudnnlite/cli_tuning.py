"""The ``cudnnlite tune`` and ``cudnnlite db`` subcommands (see cli.py)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from .errors import BadParamError

# ------------------------------------------------------------------ argument types


def positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (a clear usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def arch_name(text: str) -> str:
    """An argparse type: a GPU arch (sm_XX, sm_XXa) or cpu, the names the tuning DBs and
    the compilers use (and nothing that could point a DB path elsewhere)."""
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?|cpu", text):
        raise argparse.ArgumentTypeError(f"expected sm_XX (sm_80, sm_90, ...) or cpu, got {text!r}")
    return text


def existing_file(text: str) -> Path:
    """An argparse type: the path of an existing file."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


# ------------------------------------------------------------------ tune


def add_tune(sub: Any) -> None:
    from .problems.suites import SUITES

    p = sub.add_parser(
        "tune",
        help="time every solver on problem suites and store the rankings in the user DB",
        description="Tunes named suites (" + ", ".join(SUITES) + ") or YAML/JSON files "
        "listing problem keys or layers ({c, hw, k, f, stride, pad, groups}). Results go "
        "to the user tuning DB ($CUDNNLITE_TUNING_DIR or ~/.cache/cudnnlite/tuning).",
    )
    p.add_argument("targets", nargs="+", metavar="SUITE|FILE")
    p.add_argument("--batch", type=positive_int, default=1,
                   help="N of every problem (default 1)")  # fmt: skip
    p.add_argument("--dtype", choices=("fp32", "fp16", "bf16", "fp64"), action="append",
                   help="repeatable; default fp32")  # fmt: skip
    p.add_argument("--layout", choices=("NCHW", "NHWC"), action="append",
                   help="repeatable; default NCHW")  # fmt: skip
    p.add_argument("--hw", type=positive_int,
                   help="shrink every input to at most HW x HW (the emulator)")  # fmt: skip
    p.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--no-progress", action="store_true")


def _problems_from_file(path: Path, args: argparse.Namespace, dtype: str, layout: str) -> list:
    import yaml

    from .problems import parse_key
    from .problems.suites import ConvLayer, scaled

    doc = yaml.safe_load(path.read_text())
    if isinstance(doc, dict):
        doc = doc.get("problems", [])
    if not isinstance(doc, list):
        raise BadParamError(f"{path}: expected a list of problem keys or layers")
    out = []
    for item in doc:
        if isinstance(item, str):
            out.append(parse_key(item))
        elif isinstance(item, dict):
            layer = ConvLayer(name=str(item.get("name", "")), **{k: int(v) for k, v in item.items()
                                                                   if k != "name"})  # fmt: skip
            if args.hw:
                layer = scaled(layer, args.hw)
            out.append(layer.problem(args.batch, dtype, layout))
        else:
            raise BadParamError(f"{path}: cannot read problem {item!r}")
    return out


def collect_problems(args: argparse.Namespace) -> list:
    from .problems.suites import SUITES, problems

    out = []
    for dtype in args.dtype or ["fp32"]:
        for layout in args.layout or ["NCHW"]:
            for target in args.targets:
                if target in SUITES:
                    out += problems(target, args.batch, dtype, layout, args.hw)
                elif Path(target).is_file():
                    out += _problems_from_file(Path(target), args, dtype, layout)
                else:
                    raise BadParamError(
                        f"tune: {target!r} is neither a suite ({', '.join(SUITES)}) nor a file"
                    )
    return list(dict.fromkeys(out))


def run_tune(args: argparse.Namespace) -> int:
    from .dispatch.tuner import tune

    problems = collect_problems(args)
    results = tune(problems, backend=args.backend, progress=not args.no_progress)
    width = max((len(k) for k in results), default=10)
    print(f"{'problem':<{width}}  {'best solver':<34} {'time':>12}  candidates")
    for key, entries in results.items():
        if not entries:
            print(f"{key:<{width}}  {'(no usable solver)':<34}")
            continue
        best = entries[0]
        print(f"{key:<{width}}  {best.solver:<34} {best.time_us:10.1f}us  {len(entries)}")
    return 0


# ------------------------------------------------------------------ db
def add_db(sub: Any) -> None:
    p = sub.add_parser(
        "db",
        help="show, merge, prune or export tuning databases",
        description="The user tuning DB overrides the shipped one key by key.",
    )
    dsub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    show = dsub.add_parser("show", help="list the entries (user and shipped) of an arch")
    show.add_argument("--arch", type=arch_name,
                      help="default: this machine's (the GPU's, else cpu)")  # fmt: skip
    show.add_argument("--grep", help="only keys containing this text")
    merge = dsub.add_parser("merge", help="merge DB files into the user DB")
    merge.add_argument("files", nargs="+", type=existing_file)
    merge.add_argument("--arch", type=arch_name)
    prune = dsub.add_parser("prune", help="drop user entries that no longer validate")
    prune.add_argument("--arch", type=arch_name)
    prune.add_argument("--keep", type=positive_int,
                       help="also keep only the N (>= 1) fastest per problem")  # fmt: skip
    export = dsub.add_parser("export", help="write the merged DB (shipped + user) to a file")
    export.add_argument("file", type=Path)
    export.add_argument("--arch", type=arch_name)


def _arch(args: argparse.Namespace) -> str:
    if args.arch:
        return args.arch
    from .runtime.caps import capabilities
    from .runtime.cuda import CudaBackend
    from .runtime.select import backend_by_name

    return capabilities(backend_by_name("cuda" if CudaBackend.available() else "cpu")).arch


def merge_entries(old: list, new: list) -> list:
    """Union of two rankings: one entry per (solver, config), the faster kept, sorted."""
    best: dict[str, Any] = {}
    for e in [*old, *new]:
        ident = e.solver + json.dumps(e.config, sort_keys=True)
        cur = best.get(ident)
        if cur is None or (e.time_us or float("inf")) < (cur.time_us or float("inf")):
            best[ident] = e
    return sorted(best.values(), key=lambda e: e.time_us if e.time_us is not None else float("inf"))


def _valid(entry: Any, key: str) -> bool:
    from .dispatch import registry
    from .problems import parse_key
    from .runtime.caps import EMULATOR

    try:
        problem = parse_key(key)
        solver = registry.get(entry.solver)
        config = solver.config_from_dict(entry.config)
    except (BadParamError, TypeError, ValueError):
        return False
    return solver.family == problem.family and solver.is_valid(
        config, problem, EMULATOR
    )


def run_db(args: argparse.Namespace) -> int:
    from .dispatch import tuning_db

    arch = _arch(args)
    db = tuning_db.database(arch)
    if args.db_command == "show":
        print(f"arch {arch}; user DB {db.user_path}; shipped DB {db.shipped_path or '(none)'}")
        for key in db.keys():
            if args.grep and args.grep not in key:
                continue
            entries, source = db.lookup(key)
            print(f"{key}  [{source}]")
            for e in entries:
                t = "-" if e.time_us is None else f"{e.time_us:.1f} us"
                print(f"    {e.solver:<34} {t:>12}  ws {e.workspace:<10} {json.dumps(e.config)}")
        return 0
    if args.db_command == "merge":
        new: dict[str, list] = {}
        for f in args.files:
            for key, entries in tuning_db.read_file(f, move_corrupt=False).items():
                new[key] = merge_entries(new.get(key, []), entries)
        merged = {k: merge_entries(db.user.get(k, []), v) for k, v in new.items()}
        db.record_many(merged)
        print(f"merged {len(merged)} problems into {db.user_path}")
        return 0
    if args.db_command == "prune":
        kept: dict[str, list] = {}
        dropped = 0
        for key, entries in tuning_db.read_file(db.user_path, move_corrupt=True).items():
            good = [e for e in entries if _valid(e, key)]
            if args.keep:
                good = good[: args.keep]
            dropped += len(entries) - len(good)
            if good:
                kept[key] = good
        if db.user_path.exists():
            tuning_db.write_atomic(db.user_path, tuning_db.dump(arch, kept))
        tuning_db.forget_databases()
        print(f"pruned {dropped} entries; {len(kept)} problems left in {db.user_path}")
        return 0
    if args.db_command == "export":
        merged = dict(db.shipped)
        merged.update(db.user)
        args.file.write_text(tuning_db.dump(arch, merged))
        print(f"wrote {len(merged)} problems to {args.file}")
        return 0
    raise AssertionError(args.db_command)
