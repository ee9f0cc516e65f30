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


def test_tune_rejects_unknown_targets(fakes: Path) -> None:  # noqa: F811
    from cudnnlite.errors import BadParamError

    with pytest.raises(BadParamError, match="neither a suite"):
        main(["tune", "no_such_suite", "--backend", "cpu"])


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
