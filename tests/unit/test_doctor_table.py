"""hpcgpu doctor's table prints what the checks say, brackets included (#43 item 5)."""

from hpcgpu.cli.doctor import print_report


def test_fixes_keep_their_brackets(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per cell: nothing folded
    report = {"node": "n1", "role": "login", "checks": [
        {"name": "MPI [x]", "verdict": "warn", "summary": "no mpi4py [red]",
         "fix": "pip install 'hpcgpu[mpi]' / load the MPI module"}]}
    print_report(report, "this host")
    out = capsys.readouterr().out
    assert "pip install 'hpcgpu[mpi]' / load the MPI module" in out, out
    assert "MPI [x]" in out and "no mpi4py [red]" in out and "warn" in out, out
