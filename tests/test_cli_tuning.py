"""``cudnnlite tune`` and ``cudnnlite db``, in process, on the stand-in solvers."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudnnlite.cli import main
from cudnnlite.dispatch import tuning_db
from cudnnlite.dispatch.tuning_db import Entry
from cudnnlite.problems.conv import ConvProblem

from test_dispatch import fakes  # noqa: F401  (the fixture: fake solvers, tmp user DB)

KEY = "conv2d_fwd n1-c4-h6-w6 k5-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32"


def test_tune_a_file_then_show(fakes: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    spec = fakes / "problems.yaml"
    spec.write_text(f"- {KEY}\n- {{c: 3, hw: 5, k: 4, f: 1}}\n")
    assert main(["tune", str(spec), "--backend", "cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert KEY in out and "fake_" in out
    assert main(["db", "show", "--arch", "cpu"]) == 0
    shown = capsys.readouterr().out
    assert KEY in shown and "user DB" in shown and "fake_a" in shown


def test_tune_rejects_unknown_targets(fakes: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    assert main(["tune", "no_such_suite", "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "cudnnlite tune: error:" in err and "neither a suite" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv,says",
    [
        (["tune", "{bad}"], "cudnnlite tune: error: while parsing"),  # not YAML: one line
        (["tune", "{layers}"], "sizes must be >= 1"),
        (["tune", "resnet50", "--batch", "0"], "--batch: expected an int >= 1"),
        (["tune", "resnet50", "--hw", "-1"], "--hw: expected an int >= 1"),
        (["db", "prune", "--keep", "-1"], "--keep: expected an int >= 1"),
        (["db", "prune", "--keep", "0"], "--keep: expected an int >= 1"),
        (["db", "merge", "{missing}"], "no such file"),
        (["db", "show", "--arch", "../../etc"], "--arch: expected sm_XX"),
        (["db", "export", "{missing_dir}/x.yaml"], "No such file or directory"),
        (["demo", "--repeats", "-1"], "--repeats: expected an int >= 1"),
        (["precompile", "softmax", "--jobs", "0"], "--jobs/-j: expected an int >= 1"),
        (["resources", "--assume-block", "-5"], "--assume-block: expected an int >= 1"),
        (["doctor", "--arch", "foo", "--quick"], "--arch: expected sm_XX"),
    ],
)
def test_bad_command_lines_say_one_line_and_exit_2(
    fakes: Path, capsys: pytest.CaptureFixture, argv: list[str], says: str  # noqa: F811
) -> None:
    """Bad values, files and sizes: one line on stderr naming the problem and status 2,
    never a traceback and never a silent run (``db prune --keep -1`` dropped every
    problem's slowest entry)."""
    (fakes / "bad.yaml").write_text("garbage: [\n")
    (fakes / "layers.yaml").write_text("- {c: -3, hw: 8, k: 4, f: 3}\n")
    paths = {"bad": fakes / "bad.yaml", "layers": fakes / "layers.yaml",
             "missing": fakes / "missing.yaml", "missing_dir": fakes / "no_dir"}  # fmt: skip
    argv = [a.format(**paths) for a in argv]
    before = tuning_db.database("cpu").keys()
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert says in err, err
    assert "Traceback" not in err and "error:" in err.strip().splitlines()[-1]
    assert tuning_db.database("cpu").keys() == before


def test_merge_prune_export(fakes: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    other = fakes / "other.yaml"
    other.write_text(tuning_db.dump("cpu", {
        KEY: [Entry("fake_a", {"tile": 2}, 4.0), Entry("fake_3x3", {}, 2.0)],
        "not a key": [Entry("fake_a")],
        ConvProblem.parse(KEY.replace("c4", "c8")).key(): [Entry("gone_solver", {}, 1.0)],
    }))  # fmt: skip
    tuning_db.database("cpu").record(KEY, [Entry("fake_a", {"tile": 2}, 9.0)])
    assert main(["db", "merge", str(other), "--arch", "cpu"]) == 0
    entries, _ = tuning_db.database("cpu").lookup(KEY)
    assert [(e.solver, e.time_us) for e in entries] == [("fake_3x3", 2.0), ("fake_a", 4.0)]
    assert main(["db", "prune", "--arch", "cpu", "--keep", "1"]) == 0
    assert "pruned" in capsys.readouterr().out
    db = tuning_db.database("cpu")
    assert db.keys() == [KEY] and len(db.lookup(KEY)[0]) == 1
    target = fakes / "export.yaml"
    assert main(["db", "export", str(target), "--arch", "cpu"]) == 0
    assert KEY in target.read_text()
