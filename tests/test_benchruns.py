"""tests/benchruns.py: a documented benchmark command and its smoke test share one run."""
from __future__ import annotations

from pathlib import Path

from tests.benchruns import COMMAND, BenchRuns, key
from tests.docblocks import doc_pages, page_blocks

ROOT = Path(__file__).resolve().parents[1]


def test_the_same_command_is_the_same_run_in_any_order() -> None:
    a = key("bench_b2d.py", ["--workdir", "x", "--clips", "2", "--image-size", "24", "32"])
    b = key("bench_b2d.py", ["--image-size", "24", "32", "--clips", "2", "--workdir", "/tmp/y"])
    assert a == b
    assert a != key("bench_b2d.py", ["--clips", "3", "--image-size", "24", "32"])
    assert a != key("bench_b2d.py", ["--clips", "2", "--image-size", "24", "31"])
    assert a != key("bench_s3.py", ["--clips", "2", "--image-size", "24", "32"])
    # a repeated option keeps its last value, as argparse does
    assert key("t.py", ["--w", "0", "--k", "a", "--w", "1"]) == key("t.py", ["--k", "a", "--w", "1"])


def test_a_block_runs_each_command_once_and_reads_its_output(tmp_path: Path) -> None:
    runs = BenchRuns(tmp_path)
    code = (".venv/bin/python tools/bench_histogram.py --points 300 --rounds 1 \\\n"
            "    --calls 1\n"
            "echo between\n"
            ".venv/bin/python tools/bench_histogram.py --calls 1 --rounds 1 --points 300  # same\n")
    script, done = runs.shared_script(code)
    assert len(done) == 2 and done[0] is done[1] and len(runs.done) == 1
    assert done[0].proc.returncode == 0, done[0].proc.stderr[-2000:]
    assert script.splitlines() == [f"cat '{done[0].stdout_file}'", "echo between",
                                   f"cat '{done[0].stdout_file}'"]
    assert done[0].stdout_file.read_text() == done[0].proc.stdout and done[0].proc.stdout


def test_the_benchmark_page_runs_fewer_tools_than_it_shows() -> None:
    """docs/benchmarks.md shrinks several documented sizes to one small run each."""
    commands = [line.strip() for page in doc_pages(ROOT) for b in page_blocks(page, ROOT)
                if b.skip is None and b.lang != "python"
                for line in b.runnable().replace("\\\n", " ").splitlines()
                if COMMAND.match(line.strip())]
    keys = {key(m.group(1), m.group(2).split()) for m in map(COMMAND.match, commands)}
    assert len(commands) >= 15 and len(keys) <= len(commands) - 5, (len(commands), len(keys))
