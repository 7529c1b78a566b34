"""Can nvFuser run here, against this torch? The GPU check's first step (20 seconds at most).

    python3 benchmarks/nvfuser_probe.py            # one JSON line; exit 0 whatever it finds
    python3 benchmarks/nvfuser_probe.py --wheel    # the wheel name for this torch (docs/nvfuser.md)

nvFuser's wheels are built per CUDA and torch version (`nvfuser-cu128-torch210`: CUDA 12.8,
torch 2.10) and link the torch they were built for. The probe tries, in a child process that a
timeout can kill (a mismatched extension can hang or abort at import):

1. `import nvfuser` as installed;
2. else a stripped copy carried beside the check ($FUSIONLENS_NVFUSER_DIR, default
   benchmarks/vendor/nvfuser: the wheel unpacked without its bundled NVRTC, its renamed CUDA
   libraries resolved against the machine's through LD_LIBRARY_PATH: torch's lib folder and the
   nvidia-* packages torch brought);

and if one imports, defines and runs a one-op fusion. It prints what it found as one JSON line
(and to $FUSIONLENS_RESULTS): "status" is "runs", "imports" (no GPU to run on), "absent" or
"fails", with the error; the check uses nvFuser only when it "runs".
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import emit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = r"""
import json, torch
import nvfuser
from nvfuser import FusionDefinition, DataType
out = {"version": getattr(nvfuser, "__version__", "?"), "file": nvfuser.__file__}
if torch.cuda.is_available():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(t0, t0))
    x = torch.arange(8.0, device="cuda")
    (y,) = fd.execute([x])
    out["ran"] = bool(torch.equal(y, x * x))
print(json.dumps(out))
"""


def wheel_name() -> str:
    """nvFuser's wheel for this torch: nvfuser-cu<CUDA major minor>-torch<major minor>."""
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    cuda = (torch.version.cuda or "").replace(".", "")[:3] or "<no CUDA: nvFuser needs a CUDA build of torch>"
    return f"nvfuser-cu{cuda}-torch{major}{minor}"


def _library_path() -> str:
    import torch

    folders = [os.path.join(os.path.dirname(torch.__file__), "lib")]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    folders += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
    return os.pathsep.join(folders + [os.environ.get("LD_LIBRARY_PATH", "")])


def attempt(extra_path: str | None, budget: float) -> dict:
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = extra_path + os.pathsep + env.get("PYTHONPATH", "")
        env["LD_LIBRARY_PATH"] = _library_path()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                              timeout=budget)
    except subprocess.TimeoutExpired:
        return {"status": "fails", "detail": f"import did not finish in {budget:.0f} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        absent = "No module named 'nvfuser'" in proc.stderr
        return {"status": "absent" if absent else "fails", "detail": last[:300]}
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    status = "runs" if found.get("ran") else ("imports" if "ran" not in found else "fails")
    return {"status": status, "detail": f"nvfuser {found['version']} from {found['file']}"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--wheel" in argv:
        print(wheel_name())
        return 0
    import importlib.util

    start = time.monotonic()
    installed = importlib.util.find_spec("nvfuser") is not None
    found = attempt(None, 15.0) if installed else {"status": "absent", "detail": "no nvfuser package installed"}
    carried = os.environ.get("FUSIONLENS_NVFUSER_DIR", os.path.join(ROOT, "benchmarks", "vendor", "nvfuser"))
    if found["status"] == "absent" and os.path.isdir(carried):
        found = attempt(carried, max(1.0, 18.0 - (time.monotonic() - start)))
        found["detail"] = f"carried copy {carried}: {found['detail']}"
    try:
        found["wheel_for_this_torch"] = wheel_name()
    except Exception as e:  # torch itself does not import: say so
        found["wheel_for_this_torch"] = f"? ({type(e).__name__})"
    found["seconds"] = round(time.monotonic() - start, 2)
    print(json.dumps(found), flush=True)
    emit("nvfuser", **found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
