"""The tuning DB files: concurrent writers lose nothing; every kind of bad file or
entry is skipped with a warning and the library keeps working."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudnnlite.dispatch import tuning_db
from cudnnlite.dispatch.tuning_db import Entry, TuningDB, TuningDBWarning


def db(tmp_path: Path) -> TuningDB:
    return TuningDB("cpu", user_directory=tmp_path, shipped=False)


def test_round_trip(tmp_path: Path) -> None:
    d = db(tmp_path)
    entries = [Entry("conv_fwd_direct", {"bm": 64}, 12.5, 0), Entry("x", {}, None, 16)]
    d.record("k1", entries)
    again = db(tmp_path)
    assert again.lookup("k1") == (entries, "user DB")
    text = (tmp_path / "cpu.yaml").read_text()
    assert text.startswith("schema: 1\narch: cpu\n")


def test_four_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from pathlib import Path
        from cudnnlite.dispatch.tuning_db import Entry, TuningDB
        worker = int(sys.argv[1])
        d = TuningDB("cpu", user_directory=Path({str(tmp_path)!r}), shipped=False)
        for i in range(25):
            d.record(f"problem-{{worker}}-{{i}}", [Entry("conv_fwd_direct", {{}}, float(i), 0)])
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w)]) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    keys = db(tmp_path).keys()
    assert len(keys) == 100
    assert set(keys) == {f"problem-{w}-{i}" for w in range(4) for i in range(25)}


def test_corrupt_file_is_moved_aside_not_deleted(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text("schema: 1\nentries: [unclosed\n")
    with pytest.warns(TuningDBWarning, match="corrupt.*moved aside"):
        d = db(tmp_path)
    assert d.keys() == []
    aside = list(tmp_path.glob("cpu.yaml.corrupt-*"))
    assert len(aside) == 1 and "unclosed" in aside[0].read_text()
    d.record("k", [Entry("s")])  # and the DB works again
    assert db(tmp_path).lookup("k") is not None


def test_foreign_schema_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "cpu.yaml").write_text("schema: 99\nentries: {k: [{solver: s}]}\n")
    with pytest.warns(TuningDBWarning, match="schema 99"):
        assert db(tmp_path).lookup("k") is None


def test_malformed_entries_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "cpu.yaml").write_text(
        "schema: 1\nentries:\n  good: [{solver: s, config: {}}]\n  bad1: [{config: {}}]\n"
        "  bad2: not-a-list\n  bad3: [{solver: s, config: [1, 2]}]\n"
    )
    with pytest.warns(TuningDBWarning, match="3 malformed entries"):
        d = db(tmp_path)
    assert d.keys() == ["good"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only directories")
def test_read_only_directory_degrades_to_memory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        d = db(ro)
        with pytest.warns(TuningDBWarning, match="cannot write"):
            d.record("k", [Entry("s")])
        assert d.lookup("k") is not None  # kept in memory
    finally:
        ro.chmod(0o700)


def test_unwritable_path_degrades_to_memory(tmp_path: Path) -> None:
    # As root a read-only directory is still writable; a path under a regular file is not.
    blocker = tmp_path / "file"
    blocker.write_text("")
    d = db(blocker / "sub")
    with pytest.warns(TuningDBWarning, match="cannot write"):
        d.record("k", [Entry("s")])
    assert d.read_only and d.lookup("k") == ([Entry("s")], "user DB")
    d.record("k2", [Entry("s")])  # no second warning needed: still in memory
    assert d.lookup("k2") is not None


def test_shipped_file_is_read_only_default(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped.yaml"
    shipped.write_text(tuning_db.dump("cpu", {"k": [Entry("a")], "j": [Entry("b")]}))
    d = TuningDB("cpu", user_directory=tmp_path / "user", shipped=shipped)
    assert d.lookup("k") == ([Entry("a")], "shipped DB")
    d.record("k", [Entry("solver_c")])
    assert d.lookup("k") == ([Entry("solver_c")], "user DB")
    assert "solver_c" not in shipped.read_text()  # never written


def test_shipped_databases_are_all_valid() -> None:
    """Every entry of every file in tuning_db/ names a registered solver with a valid
    config for its problem (a renamed solver or changed config space shows here)."""
    import warnings

    from cudnnlite.cli_tuning import _valid
    from cudnnlite.runtime.sources import tuning_db_dir

    files = sorted(tuning_db_dir().glob("*.yaml"))
    assert files, "no shipped tuning DB"
    for path in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a corrupt file or bad entry warns: fail here
            entries = tuning_db.read_file(path, move_corrupt=False)
        assert entries, f"{path} is empty"
        bad = [(k, e.solver, e.config) for k, es in entries.items() for e in es if not _valid(e, k)]
        assert not bad, f"{path}: invalid entries {bad[:5]}"
