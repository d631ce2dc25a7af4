"""``cluster.jobs``: a sequence for code, a table for people (text, HTML, rich)."""

from __future__ import annotations

import io

from rich.console import Console

from hpcgpu.cluster.batch.job_table import JobInfo, JobTable

JOBS = JobTable([JobInfo("c-0", "17", "running", ("node1", "node2"), ("c-0-0-0",), 2),
                 JobInfo("c-1", None, "pending", (), (), 2)])


def test_a_sequence_of_job_infos():
    assert len(JOBS) == 2 and JOBS[0].state == "running" and [j.name for j in JOBS] == ["c-0", "c-1"]
    (first, second) = JOBS
    assert isinstance(JOBS, tuple) and second.job_id is None


def test_text_html_and_rich_show_state_nodes_and_workers():
    lines = repr(JOBS).splitlines()
    assert lines[0].split() == ["job", "job", "id", "state", "nodes", "workers", "exit", "code"]
    assert lines[1].split() == ["c-0", "17", "running", "node1,node2", "1/2", "-"]
    assert lines[2].split() == ["c-1", "-", "pending", "-", "0/2", "-"]
    html = JOBS._repr_html_()
    assert html.count("<tr>") == 3 and "<td>node1,node2</td>" in html
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(JOBS)
    assert "node1,node2" in out.getvalue() and "1/2" in out.getvalue() and "─" in out.getvalue()
