"""Benchmark results as pictures: PNG figures and a short Markdown page from a results JSON.

    python benchmarks/report.py RESULTS.json [--out DIR]   # DIR defaults to <json folder>/report
    python benchmarks/report.py --latest [--results DIR]   # newest GPU run in benchmarks/results/

``run_all.py --report DIR`` calls :func:`render` after a run, or on an earlier run with
``--summarize JSON``. Figures (matplotlib, Agg, no display needed), each drawn only when
its benchmark is in the JSON:

- ``conv_<direction>_<dtype>.png`` (``conv_3d_...`` for the 3-D rows): per layer, the
  dispatcher's choice in TFLOP/s, the best of our solvers as a tick, cuDNN's TFLOP/s (through
  PyTorch) beside it and a second panel with cuDNN's time over ours when the run had torch;
- ``memory_bound.png``, ``activation.png``: GB/s per op against a copy of the same bytes
  measured in the same run, the fraction of copy written at each bar;
- ``overhead.png``: library work per call (launch stubbed) against issue 13's targets, and
  real per-call time on each backend next to PyTorch's.

``DIR/README.md`` names the machine and the date, lists the headline lines of
``run_all.headlines``, embeds each figure with a caption, and says so at the top when the
run is no GPU run (small mode or no GPU: emulator timings). Without matplotlib the page is
still written, without figures. Figures of an earlier render in DIR are replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DRAWN = ("conv", "memory_bound", "activation", "overhead")  # benchmarks with a figure
_OURS, _TORCH, _COPY, _BAD = "#1f77b4", "#ff7f0e", "#c8c8c8", "#d62728"


@dataclass
class Figure:
    """One PNG of the page and its one-line caption."""

    path: Path
    title: str
    caption: str


# ------------------------------------------------------------------ the results document


def gpu_name(doc: dict[str, Any]) -> str | None:
    """The run's GPU 0 as ``cudnnlite info`` read it, or None."""
    gpu = doc.get("machine", {}).get("cuda", {}).get("GPU 0")
    return gpu if gpu and not gpu.startswith("unreadable") else None


def is_gpu_run(doc: dict[str, Any]) -> bool:
    """A full run on a machine with a GPU (small mode times the emulator even there)."""
    return not doc.get("small", True) and gpu_name(doc) is not None


def latest_gpu_results(folder: Path = RESULTS_DIR) -> Path | None:
    """The newest run_all JSON under ``folder`` measured on a GPU, by its recorded date."""
    found: list[tuple[str, Path]] = []
    for path in folder.rglob("*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "results" in doc and is_gpu_run(doc):
            if any(name in doc["results"] for name in DRAWN):
                found.append((str(doc.get("date", "")), path))
    return max(found)[1] if found else None


# ------------------------------------------------------------------ figures


def _new_figure(width: float, height: float, panels: int = 1, **kwargs: Any) -> tuple:
    """A figure without pyplot (no global state, no display): Figure.savefig draws with Agg."""
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(panels, 1, squeeze=False, **kwargs)[:, 0]


def _save(fig: Any, title: str, out: Path) -> None:
    """Title, one legend for every panel below them (never over a bar), and the PNG."""
    fig.suptitle(title)
    fig.legend(loc="outside lower center", ncols=4, fontsize="small", frameon=False)
    fig.savefig(out, dpi=100)


def _log_if_wide(ax: Any, values: list[float]) -> None:
    """A log axis where the bars span decades (emulator launches next to GPU ones)."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) > 30 * min(positive):
        ax.set_xscale("log")


def _conv_groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Rows by (conv.summarize's key: "fp32", "bwd_data fp16", "3d fp16"; a file name)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        direction, dtype = r.get("direction", "fwd"), r["dtype"]
        name = dtype if direction == "fwd" else f"{direction} {dtype}"
        slug = f"{direction}_{dtype}"
        if r["key"].startswith("conv3d"):
            name, slug = f"3d {name}", f"3d_{slug}"
        groups.setdefault((name, f"conv_{slug}.png"), []).append(r)
    return groups


def _conv_layers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer (in the benchmark's order): a label, the dispatcher's choice and best of
    ours in TFLOP/s, cuDNN's TFLOP/s and its time over ours (None where not measured)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    one_suite = len({r["suite"] for r in rows}) == 1
    layers = []
    for same in by_key.values():
        first, timed = same[0], [r for r in same if "tflops" in r]
        chosen = next((r for r in timed if r["solver"] == r["chosen"]), None)
        torch_ms = next((r["torch_ms"] for r in timed if "torch_ms" in r), None)
        label = first["layer"] if one_suite else f"{first['suite']}/{first['layer']}"
        layers.append(
            {
                "label": label if chosen else f"{label} (choice not timed)",
                "ours": chosen["tflops"] if chosen else 0.0,
                "best": max((r["tflops"] for r in timed), default=0.0),
                "torch": first["gflop"] / torch_ms if torch_ms else None,
                "ratio": chosen.get("torch_over_ours") if chosen else None,
            }
        )
    return layers


def conv_figure(name: str, rows: list[dict[str, Any]], target: str, out: Path) -> Figure:
    """One summary group: the dispatcher's choice per layer, cuDNN beside it when measured."""
    layers = _conv_layers(rows)
    has_torch = any(v["torch"] is not None for v in layers)
    x = list(range(len(layers)))
    w = 0.4 if has_torch else 0.7
    left = [i - w / 2 for i in x] if has_torch else x
    fig, axes = _new_figure(
        max(6.0, 0.3 * len(x) + 2), 7.0 if has_torch else 4.5, 2 if has_torch else 1, sharex=True
    )
    ax = axes[0]
    ax.bar(left, [v["ours"] for v in layers], w, color=_OURS, label="cudnnlite (dispatcher)")
    ax.scatter(
        left,
        [v["best"] for v in layers],
        marker="_",
        s=200,
        color="black",
        zorder=3,
        label="best of our solvers",
    )
    if has_torch:
        theirs = [v["torch"] or 0.0 for v in layers]
        ax.bar([i + w / 2 for i in x], theirs, w, color=_TORCH, label="cuDNN (PyTorch)")
        ratio = [v["ratio"] or 0.0 for v in layers]
        bars = axes[1].bar(x, ratio, 0.7, color=[_OURS if v >= 1 else _BAD for v in ratio])
        axes[1].bar_label(
            bars,
            [f"{v:.2f}" if v else "n/a" for v in ratio],
            fontsize="x-small",
            rotation=90,
            padding=2,
        )
        axes[1].axhline(1.0, color="black", linewidth=0.8)
        axes[1].set_ylabel("cuDNN time / ours\n(> 1: we are faster)")
    ax.set_ylabel("TFLOP/s")
    axes[-1].set_xticks(x, [v["label"] for v in layers], rotation=90, fontsize="small")
    _save(fig, f"convolution {name} on {target}", out)
    if has_torch:
        vs = ", beside cuDNN's through PyTorch, and cuDNN's time over ours below"
    else:
        vs = "; no cuDNN figures in this run (PyTorch on CUDA absent)"
    return Figure(
        out,
        f"Convolution {name}",
        f"TFLOP/s per layer of the dispatcher's choice (tick: the best of our solvers){vs}.",
    )


def bandwidth_figure(
    title: str, rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str], out: Path
) -> Figure:
    """GB/s per row (horizontal bars) over a grey bar: a copy of the same bytes."""
    fig, axes = _new_figure(9.0, 0.24 * len(rows) + 1.8)
    ax, y = axes[0], list(range(len(rows)))
    copy = [r.get("copy_gbs", 0.0) for r in rows]
    ax.barh(y, copy, 0.8, color=_COPY, label="copy of the same bytes")
    ax.barh(y, [r.get("gbs", 0.0) for r in rows], 0.45, color=_OURS, label="cudnnlite")
    torch = [i for i, r in enumerate(rows) if "torch_over_ours" in r]
    if torch:
        gbs = [rows[i]["gbs"] / rows[i]["torch_over_ours"] for i in torch]
        ax.scatter(gbs, torch, marker="|", s=80, color=_TORCH, zorder=3, label="PyTorch")
    for i, r in enumerate(rows):
        if "gbs" in r:
            at, text, color = max(r["gbs"], r["copy_gbs"]), f" {r['of_copy']:.0%}", "black"
        else:
            at, text, color = 0.0, " error (not timed)", _BAD
        ax.text(at, i, text, va="center", fontsize="x-small", color=color)
    ax.set_yticks(y, [label(r) for r in rows], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (bytes a perfect kernel moves / time)")
    _save(fig, title, out)
    who = ", PyTorch's as a tick" if torch else ""
    return Figure(
        out,
        title,
        f"GB/s per case against a copy of the same bytes measured in "
        f"the same run (grey; goal >= 90%), the fraction of copy at each bar{who}.",
    )


def _mb_label(r: dict[str, Any]) -> str:
    return f"{r['name']} {r['shape']} {r['dtype']}"


def _act_label(r: dict[str, Any]) -> str:
    if r["mode"] == "*":  # the dtype's setup raised: no mode ran
        return f"every mode {r['dtype']}"
    return f"{r['mode']} {r['direction']} {r['dtype']}"


def overhead_figure(res: dict[str, Any], out: Path) -> Figure:
    """Library work per call against its targets; real per-call time per backend and torch."""
    work, real = res["library_work"], res["real"]
    has_torch = any("torch_us" in r for r in real)
    slots = [len(work) + 2, len(real) * (2 if has_torch else 1) + 2]  # bars and the axis
    fig, (ax, ax2) = _new_figure(9.0, 0.22 * sum(slots) + 1.5, 2, height_ratios=slots)
    y = list(range(len(work)))
    us = [r["us"] for r in work]
    ax.barh(y, us, 0.6, color=[_BAD if r["meets"] is False else _OURS for r in work])
    targets = [i for i, r in enumerate(work) if r["target_us"] is not None]
    goals = [work[i]["target_us"] for i in targets]
    if targets:
        ax.scatter(
            goals, targets, marker="|", s=150, color="black", zorder=3, label="target (issue 13)"
        )
    ax.set_yticks(y, [r["op"] for r in work], fontsize="small")
    ax.set_title("library work per call (emulator arrays, launch stubbed)", fontsize="medium")
    ax.set_xlabel("us per call (red: misses its target)")
    _log_if_wide(ax, us + goals)
    y = list(range(len(real)))
    h = 0.4 if has_torch else 0.6
    us = [r["us"] for r in real]
    ax2.barh([i - h / 2 for i in y] if has_torch else y, us, h, color=_OURS, label="cudnnlite")
    if has_torch:
        theirs = [r.get("torch_us", 0.0) for r in real]
        ax2.barh([i + h / 2 for i in y], theirs, h, color=_TORCH, label="PyTorch")
        us += theirs
    where = {"cpu": "emulator", "cuda": "GPU"}
    labels = [f"{r['op']} ({where.get(r['backend'], r['backend'])})" for r in real]
    ax2.set_yticks(y, labels, fontsize="small")
    ax2.set_title(
        "per call with real launches (GPU: a synchronize per batch of calls)", fontsize="medium"
    )
    ax2.set_xlabel("us per call")
    _log_if_wide(ax2, us)
    for a in (ax, ax2):
        a.invert_yaxis()
    _save(fig, "per-call overhead", out)
    who = ", PyTorch's beside it" if has_torch else ""
    return Figure(
        out,
        "Per-call overhead",
        f"Top: the library's own work per call against issue 13's targets; "
        f"bottom: wall time per call with real launches on each backend{who}.",
    )


def _figures(doc: dict[str, Any], out_dir: Path) -> tuple[list[Figure], list[str]]:
    """Every figure the results allow, and a line for each one left out."""
    res, figures, notes = doc.get("results", {}), [], []
    conv = res.get("conv")
    if conv:
        for (name, file), rows in _conv_groups(conv["rows"]).items():
            figures.append(conv_figure(name, rows, conv["target"], out_dir / file))
    mb = res.get("memory_bound")
    if mb:
        title = f"Memory-bound primitives on {mb['target']}"
        figures.append(bandwidth_figure(title, mb["rows"], _mb_label, out_dir / "memory_bound.png"))
    act = res.get("activation")
    if act:
        title = f"Activations on {act['target']}, {act['elements']} elements"
        rows = act["bandwidth"]
        figures.append(bandwidth_figure(title, rows, _act_label, out_dir / "activation.png"))
    if res.get("overhead"):
        figures.append(overhead_figure(res["overhead"], out_dir / "overhead.png"))
    for name in DRAWN:
        if name in doc.get("errors", {}):
            notes.append(f"{name}: no figure, the benchmark crashed in this run")
        elif not res.get(name):
            notes.append(f"{name}: no figure, not in this results file")
    return figures, notes


# ------------------------------------------------------------------ the page


def _machine_lines(doc: dict[str, Any]) -> list[str]:
    m = doc.get("machine", {})
    cuda, cpu = m.get("cuda", {}), m.get("cpu", {})
    lines = [
        f"- date: {doc.get('date', '?')}; mode: {'small' if doc.get('small') else 'full'}",
        f"- GPU: {gpu_name(doc) or 'none'}",
    ]
    if gpu_name(doc):
        lines.append(
            f"- CUDA runtime {cuda.get('CUDA runtime', '?')}, driver "
            f"{cuda.get('CUDA driver', '?')}, CuPy {cuda.get('cupy', '?')}"
        )
    if cpu:
        lines.append(
            f"- CPU: {cpu.get('model', '?')}, {cpu.get('cores', '?')} cores, load "
            f"{cpu.get('load_average')}"
        )
    torch = m.get("torch", {}).get("version")
    version = m.get("cudnnlite", {}).get("version", "?")
    lines.append(f"- cudnnlite {version}" + (f"; torch {torch}" if torch else ""))
    if doc.get("command"):
        lines.append(f"- command: `{doc['command']}`")
    return lines


def _page(doc: dict[str, Any], figures: list[Figure], notes: list[str], why: str | None) -> str:
    import run_all

    head = ["# cudnnlite benchmark report", ""]
    if not is_gpu_run(doc):
        head += [
            "**No GPU figures: this is an emulator run** (small mode or no GPU). The "
            "numbers below time the CUDA kernels on the CPU emulator; they show that "
            "every benchmark runs, and say nothing about speed on a GPU.",
            "",
        ]
    body = [*head, *_machine_lines(doc), "", "## Headline figures", ""]
    body += [f"- {line}" for line in run_all.headlines(doc)] or ["(none)"]
    body += ["", "## Figures", ""]
    if why:
        body += [f"No figures drawn: {why}.", ""]
    for f in figures:
        body += [f"### {f.title}", "", f"![{f.title}]({f.path.name})", "", f.caption, ""]
    others = sorted(set(doc.get("results", {})) - set(DRAWN))
    if others:
        notes = [*notes, f"headline lines only (no figure yet): {', '.join(others)}"]
    if notes:
        body += ["## Not drawn", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(body)


def render(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """Writes the figures and ``out_dir/README.md``; returns their paths (the page last)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("conv_*.png"), *(out_dir / f"{n}.png" for n in DRAWN)]:
        old.unlink(missing_ok=True)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        figures, notes = [], []
        why = "matplotlib is not importable here (`pip install matplotlib`)"
    else:
        figures, notes = _figures(doc, out_dir)
        why = None
    page = out_dir / "README.md"
    page.write_text(_page(doc, figures, notes, why))
    return [f.path for f in figures] + [page]


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="?", type=Path, help="a run_all.py results JSON")
    p.add_argument("--out", type=Path, help="folder for the page and figures")
    p.add_argument(
        "--latest",
        action="store_true",
        help="the newest GPU run in --results; pictures in <--results>/report",
    )
    p.add_argument(
        "--results",
        dest="results_dir",
        type=Path,
        default=RESULTS_DIR,
        help="where --latest looks (default benchmarks/results)",
    )
    args = p.parse_args(argv)
    if args.latest == (args.results is not None):
        p.error("give a results JSON or --latest (one of them)")
    path = args.results
    if args.latest:
        path = latest_gpu_results(args.results_dir)
        if path is None:
            print(f"no GPU results in {args.results_dir}/: nothing to draw")
            return 0
    out = args.out or (args.results_dir / "report" if args.latest else path.parent / "report")
    written = render(json.loads(path.read_text()), out)
    print(f"{path} -> " + ", ".join(str(w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
