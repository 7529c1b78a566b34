"""The page's kernel table: each Triton region's kernels as they launch and as they compile for
the target GPU (Region.launch, Region.static), with the findings (fusionlens/report/kernels.py),
folded under the header beside the roofline's figures. Plain HTML: no script needed."""

from __future__ import annotations

import html

from fusionlens.report import kernels as K, schema as R


def table(report: R.CompileReport) -> str:
    """A `<details>` with one row a kernel; "" when no region has kernels to show."""
    rows = []
    for program in report.programs:
        for r in program.regions + [x for p in program.previews for x in p.regions]:
            statics = {s.kernel: s for s in r.static}
            for launch in r.launch:
                s = statics.get(launch.kernel)
                compiled = K.static_text(s).removeprefix(f"{s.kernel} ") if s else "not compiled (`--static`)"
                cells = [r.id, launch.kernel, K.launch_text(launch).split(": ", 1)[1], compiled]
                rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
            for finding in r.findings:
                rows.append(f'<tr class="finding"><td>{html.escape(r.id)}</td><td colspan="3">⚠ '
                            f"{html.escape(finding)}</td></tr>")
    if not rows:
        return ""
    head = "<tr><th>region</th><th>kernel</th><th>launch</th><th>compiled for the target GPU</th></tr>"
    return (f'<details class="kernels"><summary>Triton kernels: launch and static analysis</summary>'
            f"<table>{head}{''.join(rows)}</table></details>")
