"""The dispatcher: selection order, settings, switches, plans, benchmark mode, explain.

Runs against stand-in solvers (tests/fake_solvers.py) computing with the reference,
so that the dispatch logic is tested apart from any kernel."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.dispatch import heuristics, plans, registry, select, settings, tuning_db
from cudnnlite.dispatch.tuning_db import Entry, TuningDBWarning
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.runtime.select import backend_by_name

import fake_solvers

P3 = ConvProblem.parse("conv2d_fwd n1-c4-h6-w6 k5-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32")
P1 = ConvProblem.parse("conv2d_fwd n1-c4-h6-w6 k5-r1-s1 p0x0-u1x1-d1x1 g1 NCHW fp32")
CPU = backend_by_name("cpu")


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Only the fake solvers, an empty user DB in tmp, no shipped DB, default settings."""
    monkeypatch.setattr(registry, "_ENTRIES", fake_solvers.ENTRIES)
    monkeypatch.setattr(registry, "NAMES", tuple(n for n, _ in fake_solvers.ENTRIES))
    registry._load.cache_clear()
    monkeypatch.setitem(heuristics.RANKINGS, "conv_fwd", lambda p, caps: ["fake_3x3", "fake_a"])
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path / "user"))
    monkeypatch.setattr(tuning_db, "shipped_path", lambda arch: None)
    for var in ("CUDNNLITE_DISABLE_SOLVERS", "CUDNNLITE_FORCE_SOLVER", "CUDNNLITE_FORCE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    tuning_db.forget_databases()
    plans.clear_plan_cache()
    select._warned_keys.clear()
    old = settings.current()
    yield tmp_path
    settings._current = old
    registry._load.cache_clear()
    tuning_db.forget_databases()
    plans.clear_plan_cache()


def choose(problem: ConvProblem = P3, algo: str = "auto") -> select.Choice:
    return select.select(problem, CPU, algo)


def test_heuristic_takes_the_first_applicable_in_rank_order() -> None:
    assert choose(P3).solver.name == "fake_3x3"
    c = choose(P1)  # fake_3x3 does not apply to a 1x1 filter
    assert (c.solver.name, c.source) == ("fake_a", "heuristic")


def test_explicit_algo_and_its_reason() -> None:
    assert choose(P3, "fake_a").source == "explicit"
    with pytest.raises(NotSupportedError, match="fake_3x3 cannot run .*needs a 3x3 filter"):
        choose(P1, "fake_3x3")
    with pytest.raises(BadParamError, match="unknown solver 'nope'"):
        choose(P1, "nope")


def test_user_db_beats_shipped_db_beats_heuristic(
    fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = fakes / "cpu.yaml"
    shipped.write_text(tuning_db.dump("cpu", {P3.key(): [Entry("fake_ws", {}, 5.0, 1 << 20)]}))
    monkeypatch.setattr(tuning_db, "shipped_path", lambda arch: shipped)
    tuning_db.forget_databases()
    c = choose(P3)
    assert (c.solver.name, c.source, c.time_us) == ("fake_ws", "shipped DB", 5.0)
    tuning_db.database("cpu").record(P3.key(), [Entry("fake_a", {"tile": 2}, 3.0, 0)])
    c = choose(P3)
    assert (c.solver.name, c.source, c.config) == ("fake_a", "user DB", fake_solvers.TileConfig(2))
    assert choose(P1).source == "heuristic"  # no entry for this key


def test_invalid_db_entries_are_skipped_with_one_warning() -> None:
    db = tuning_db.database("cpu")
    db.record(P3.key(), [
        Entry("no_such_solver", {}, 1.0),
        Entry("fake_a", {"tile": 3}, 2.0),      # invalid config value
        Entry("fake_a", {"unknown": 1}, 2.5),   # unknown field
        Entry("fake_3x3", {}, 4.0),
    ])  # fmt: skip
    with pytest.warns(TuningDBWarning, match="no_such_solver"):
        c = choose(P3)
    assert (c.solver.name, c.source) == ("fake_3x3", "user DB")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choose(P3)  # the same key does not warn twice


def test_workspace_limit_and_determinism(fakes: Path) -> None:
    ranked = [Entry("fake_ws", {}, 1.0, 1 << 20), Entry("fake_nondet", {}, 2.0), Entry("fake_a")]
    tuning_db.database("cpu").record(P1.key(), ranked)
    assert choose(P1).solver.name == "fake_ws"
    with cl.settings(workspace_limit=1024):
        assert choose(P1).solver.name == "fake_nondet"
        with cl.settings(deterministic=True):
            assert choose(P1).solver.name == "fake_a"
            with pytest.raises(NotSupportedError, match="not bitwise reproducible"):
                choose(P1, "fake_nondet")
        with pytest.raises(NotSupportedError, match="workspace"):
            choose(P1, "fake_ws")
    assert settings.current().workspace_limit == settings.DEFAULT_WORKSPACE_LIMIT


def test_environment_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_DISABLE_SOLVERS", "fake_3x3")
    assert choose(P3).solver.name == "fake_a"
    monkeypatch.setenv("CUDNNLITE_FORCE_SOLVER", "fake_a")
    monkeypatch.setenv("CUDNNLITE_FORCE_CONFIG", '{"tile": 4}')
    c = choose(P3)
    assert c.source.startswith("forced") and c.config == fake_solvers.TileConfig(4)
    monkeypatch.setenv("CUDNNLITE_FORCE_CONFIG", "{bad json")
    with pytest.raises(BadParamError, match="CUDNNLITE_FORCE_CONFIG"):
        choose(P3)


def test_settings_are_validated() -> None:
    with pytest.raises(BadParamError, match="mode"):
        cl.set_mode("fastest")
    with pytest.raises(BadParamError, match="limit"):
        cl.set_workspace_limit(-1)
    with pytest.raises(BadParamError, match="flag"):
        cl.set_deterministic("yes")
    with pytest.raises(BadParamError, match="unknown setting"):
        with cl.settings(speed=1):
            pass


def test_benchmark_mode_tunes_once_then_reads_the_db(fakes: Path) -> None:
    cl.set_mode("benchmark")
    c = choose(P1)
    assert c.source == "tuned"
    text = (fakes / "user" / "cpu.yaml").read_text()
    assert P1.key() in text and "fake_a" in text and "time_us" in text
    tuning_db.forget_databases()  # a later run: reads what was stored
    assert choose(P1).source == "user DB"


def test_plans_are_cached_and_reused() -> None:
    x, w = fake_solvers.problem_data(P3)
    y1 = cl.conv2d(x, w, padding=1)
    plan = plans.get_plan(CPU, P3)
    assert plans.get_plan(CPU, P3) is plan
    p = cl.conv2d_plan(x.shape, w.shape, padding=1, backend="cpu")
    y2 = p(x, w)
    np.testing.assert_array_equal(y1, y2)
    assert p.solver == "fake_3x3" and p.source == "heuristic"
    with cl.settings(deterministic=True):  # other settings: another plan
        assert plans.get_plan(CPU, P3) is not plan
    with pytest.raises(BadParamError, match="x: expected shape"):
        p(x[:, :, :5], w)


def test_explain_lists_every_solver() -> None:
    e = cl.explain(P1, "cpu")
    names = [r.name for r in e.rows]
    assert names == list(registry.NAMES)
    row = {r.name: r for r in e.rows}
    assert not row["fake_3x3"].applicable and "3x3" in row["fake_3x3"].reason
    assert e.choice == "fake_a" and row["fake_a"].chosen
    text = str(e)
    assert "fake_3x3" in text and "needs a 3x3 filter" in text and "choice:  fake_a" in text
    assert "<table>" in e._repr_html_()


def test_tune_ranks_every_config(fakes: Path) -> None:
    result = cl.tune([P1, P3.key()], backend="cpu", progress=False)
    ranked = result[P1.key()]
    assert {(e.solver, e.config.get("tile")) for e in ranked} >= {("fake_a", 1), ("fake_a", 2),
                                                                   ("fake_a", 4)}  # fmt: skip
    times = [e.time_us for e in ranked]
    assert times == sorted(times)
    assert "fake_3x3" in {e.solver for e in result[P3.key()]}


def test_explain_and_tune_refuse_what_is_not_a_problem() -> None:
    with pytest.raises(BadParamError, match="problem: expected a problem"):
        cl.explain(42)
    with pytest.raises(BadParamError, match="not a convolution problem key"):
        cl.explain("conv2d_fwd nonsense")
    with pytest.raises(BadParamError, match="not an attention problem key"):
        cl.explain("sdpa_fwd nonsense")
    with pytest.raises(BadParamError, match="keys start with conv, rnn, sdpa"):
        cl.explain("pool2d_fwd n1")
    with pytest.raises(BadParamError, match="algo: unknown solver 'bogus'"):
        cl.explain(P1, "cpu", algo="bogus")
    with pytest.raises(BadParamError, match="algo: expected 'auto'"):
        cl.explain(P1, "cpu", algo=["fake_a"])
    with pytest.raises(BadParamError, match="algo: fake_a solves"):
        cl.explain("sdpa_fwd b1-hq1-hkv1 sq8-skv8 d16-dv16 BHSD fp32",
                   "cpu", algo="fake_a")  # fmt: skip
    # an algo that names a real solver which cannot run the problem is explained
    e = cl.explain(P1, "cpu", algo="fake_3x3")
    assert e.choice is None and "3x3" in (e.error or "")
    with pytest.raises(BadParamError, match="problems: expected problem objects"):
        cl.tune([P1, 3.5], backend="cpu", progress=False)
    with pytest.raises(BadParamError, match="unknown backend"):
        cl.tune(P1, backend="tpu", progress=False)


def test_float64_keys_in_the_tuning_db_and_explain(fakes: Path) -> None:
    # fp64 is part of the key: an entry for it neither serves nor hides the fp32 problem
    p64 = ConvProblem.parse(P3.key().replace(" fp32", " fp64"))
    assert p64.dtype == "fp64" and ConvProblem.parse(p64.key()) == p64
    tuning_db.database("cpu").record(p64.key(), [Entry("fake_a", {"tile": 4}, 2.0, 0)])
    tuning_db.forget_databases()  # read back from the file
    c = choose(p64)
    assert (c.solver.name, c.source, c.config) == ("fake_a", "user DB", fake_solvers.TileConfig(4))
    assert choose(P3).source == "heuristic"
    e = cl.explain(p64.key(), "cpu")
    assert e.choice == "fake_a" and e.source == "user DB" and "NCHW fp64" in str(e)
