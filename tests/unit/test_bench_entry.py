"""`python -m bench NAME`: the run's JSON holds the command, the exit status, the printed lines and
each recorded figure as a field of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_a_benchmark_run_writes_its_figures_as_fields(tmp_path: Path) -> None:
    out = tmp_path / "results"
    # a benchmark module that records two figures and prints a line, run through the entry point
    script = (
        "import sys, types\n"
        "import bench.__main__ as m\n"
        "from bench.figures import figure\n"
        "mod = types.ModuleType('bench.tiny')\n"
        "mod.__doc__ = 'tiny'\n"
        "def main():\n"
        "    print('tiny: 2 figures')\n"
        "    figure('first sync', 1.25, 's', services=1000, proxy='nftproxy')\n"
        "    figure('RSS', 80, 'MB', services=1000, proxy='nftproxy')\n"
        "    return 0\n"
        "mod.main = main\n"
        "sys.modules['bench.tiny'] = mod\n"
        "m.BENCHES = (*m.BENCHES, 'tiny')\n"
        "sys.exit(m.main(['tiny', '--x']))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env={"NFTPROXY_BENCH_RESULTS": str(out), "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 0, r.stderr
    (path,) = out.glob("tiny-*.json")
    result = json.loads(path.read_text())
    assert (result["bench"], result["argv"], result["exit"]) == ("tiny", ["--x"], 0)
    assert result["output"] == ["tiny: 2 figures"]
    assert result["figures"] == [
        {"what": "first sync", "value": 1.25, "unit": "s", "services": 1000, "proxy": "nftproxy"},
        {"what": "RSS", "value": 80, "unit": "MB", "services": 1000, "proxy": "nftproxy"},
    ]
