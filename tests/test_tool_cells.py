"""tools/cells.py: a benchmark tool's cell gives the same output, exit status and errors
whether it runs as a fresh interpreter (the default, as documented) or forked after the
tool's imports (CARLA_WDS_BENCH_FORK_CELLS=1, the suite's smoke runs: tests/benchruns.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.benchruns import FORK_CELLS, env

TOOLS = Path(__file__).resolve().parents[1] / "tools"
# a tool whose cells are its own main() with --cell; the parent runs each and prints what
# came back
TOOL = '''
import json, os, subprocess, sys
sys.path.insert(0, {tools!r})
import cells

def main():
    if sys.argv[1:2] == ["--cell"]:
        what = sys.argv[2]
        if what == "print":
            print("noise")
            print(json.dumps({{"torch_before": "torch" in sys.modules, "cwd": os.getcwd()}}))
        elif what == "exit":
            raise SystemExit("a one-line reason")
        elif what == "return":
            return 3
        elif what == "raise":
            raise KeyError("boom")
        elif what == "sleep":
            import time; time.sleep(3600)   # ends only if killed
        return 0
    out = {{}}
    for what in ("print", "exit", "return", "raise"):
        proc = cells.run([sys.executable, __file__, "--cell", what], cwd={cwd!r})
        out[what] = [proc.returncode, proc.stdout, proc.stderr.strip().splitlines()[-1:]]
    try:
        cells.run([sys.executable, __file__, "--cell", "sleep"], timeout=0.5)
    except subprocess.TimeoutExpired:
        out["timeout"] = True
    try:
        cells.run([sys.executable, __file__, "--cell", "return"], check=True)
    except subprocess.CalledProcessError as exc:
        out["check"] = exc.returncode
    print(json.dumps(out))

if __name__ == "__main__":
    sys.exit(main())
'''


def _run(tool: Path, fork: str) -> dict:
    proc = subprocess.run([sys.executable, str(tool)], capture_output=True, text=True,
                          timeout=300, env={**env(), FORK_CELLS: fork})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_forked_cell_is_a_fresh_ones_output_status_and_errors(tmp_path: Path) -> None:
    tool = tmp_path / "toy_tool.py"
    tool.write_text(TOOL.format(tools=str(TOOLS), cwd=str(tmp_path)))
    fresh, forked = _run(tool, "0"), _run(tool, "1")
    # the forked cell came after the preload (torch imported), the fresh one has not
    for got, torch_before in ((fresh, False), (forked, True)):
        code, stdout, _ = got.pop("print")
        lines = stdout.splitlines()
        assert code == 0 and lines[0] == "noise", stdout
        assert json.loads(lines[1]) == {"torch_before": torch_before, "cwd": str(tmp_path)}
    assert fresh == forked, (fresh, forked)
    assert forked["exit"] == [1, "", ["a one-line reason"]]
    assert forked["return"][0] == 3 and forked["raise"][0] == 1
    assert forked["raise"][2] == ["KeyError: 'boom'"]
    assert forked["timeout"] is True and forked["check"] == 3
