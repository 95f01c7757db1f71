"""Every ```bash, ```sh and ```python block of README.md and docs/**/*.md runs, so a documented
command cannot silently break (issue 28).

Each page gets its own temporary working folder; its blocks run there in order (a later block
uses what an earlier one made), python blocks with this venv's interpreter and bash blocks with
`bash -euo pipefail`, the venv's bin first on PATH. The folder looks like a checkout's root for
reading: `.venv`, `tools`, `configs` and `carla_wds` are links to the repository's, so a
command written as `.venv/bin/python tools/bench_pack.py ...` runs as documented. A block runs
as written unless the HTML comment above it says otherwise (tests/docblocks.py: smaller sizes
with `replace`, data the page assumes with `before`, `timeout`, or `skip (reason)`).

One test per block (`test_block[<page>:<line>]`), so a failure names the page and line; a
skipped block is reported as skipped with its reason. `SKIPS` lists every skipped block:
adding a skip means adding it here, with its reason, so they stay a small, known set.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchruns import BenchRuns, env as bench_env
from tests.docblocks import Block, DirectiveError, doc_pages, page_blocks

ROOT = Path(__file__).resolve().parents[1]
LINKED = (".venv", "tools", "configs", "carla_wds")   # read-only parts of a checkout

# page:first line of the block -> why it cannot run here. Keep it short: shrink sizes instead.
_THEIRS = "'s training script, before and after: runs only inside their repository checkout"
_TCP_CHECKOUT = "needs TCP's repository checkout at the pinned commit: --repo-dir tcp=..."
SKIPS: dict[str, str] = {
    "README.md:pip install -e .                         # from a clone of this repository "
    "(Python >= 3.10)": "installs into the environment the suite runs in: make install",
    "README.md:make demo   # creates .venv, synthesises routes, packs train/val, verifies, "
    "inspects,": "make test is this suite; make demo is tools/demo.py's two minutes of "
    "torchrun training",
    "docs/adapters/b2d_tcp.md:# before": "an excerpt of Bench2Drive-TCP" + _THEIRS,
    "docs/adapters/garage.md:# before": "an excerpt of carla_garage" + _THEIRS,
    "docs/adapters/tcp.md:# before": "an excerpt of TCP" + _THEIRS,
    "docs/adapters/transfuser2022.md:# before": "an excerpt of TransFuser" + _THEIRS,
    "docs/packing.md:export AWS_PROFILE=...          # or AWS_ACCESS_KEY_ID / "
    "AWS_SECRET_ACCESS_KEY": "needs an S3 store and its credentials; tests/pack/test_pack_s3*.py "
    "run pack, verify and merge against moto's S3 server",
    "docs/training.md:# two nodes x 8 GPUs: run on both machines with NODE_RANK=0 and 1":
        "needs two machines with 8 GPUs each",
    "docs/benchmarks.md:.venv/bin/python tools/bench_gpu.py --workdir /tmp/bench_gpu --steps 200 "
    "--workers 4,8,16": "needs a GPU: the CUDA path, nccl and bf16, at the tcp config's full size",
    "docs/benchmarks.md:make demo                                                  # 12 train "
    "routes x 60 frames": "make demo and its small case always train 20 epochs with torchrun: "
    "1-2 minutes each",
    # twice: two runs of it, at two sizes
    "docs/benchmarks.md:.venv/bin/python tools/bench_adapters.py --workdir /tmp/bench_adapters "
    "--repo-dir tcp=/tmp/golden_src/TCP \\": _TCP_CHECKOUT,
    "docs/benchmarks.md:.venv/bin/python tools/bench_adapters.py --workdir "
    "/tmp/bench_adapters_raw --repo-dir tcp=/tmp/golden_src/TCP \\": _TCP_CHECKOUT,   # raw cameras
}
_AB = ("checks out the baseline commit as a git worktree of this repository, from its root: a "
       "record of that comparison, not runnable in a temporary folder")
for _ref in ("246d6b5 --workdir /tmp/ab", "218040d --workdir /tmp/ab2",
             "4c4c18b --workdir /tmp/ab23 --garage --repeats 5",
             "411a315 --workdir /tmp/ab_rev2 --garage --formats png --workers-list 0 --repeats 3",
             "7f23492 --workdir /tmp/ab40f --repeats 4"):
    SKIPS[f"docs/benchmarks.md:.venv/bin/python tools/bench_ab.py --ref {_ref}"] = _AB
SKIP_COUNT = 18   # the first bench_adapters line skips two blocks


def _all_blocks() -> list[Block]:
    return [b for page in doc_pages(ROOT) for b in page_blocks(page, ROOT)]


BLOCKS = _all_blocks()


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, dict]:
    """page -> {"dir": its working folder, "done": line numbers of the blocks already run}."""
    return {}


def _folder(folders: dict[str, dict], page: str, factory) -> dict:
    if page not in folders:
        work = factory.mktemp(page.replace("/", "_").replace(".md", ""))
        for name in LINKED:
            if (ROOT / name).exists():
                (work / name).symlink_to(ROOT / name)
        folders[page] = {"dir": work, "done": set()}
    return folders[page]


def _env() -> dict[str, str]:
    return bench_env()   # the blocks see the installed package, as a user does


def _run(block: Block, work: Path, benches: BenchRuns) -> None:
    for command in block.before:
        _execute(block, "bash", command + "\n", work, f"before {command!r}")
    code = block.runnable()
    if block.lang != "python":   # a benchmark command runs once per suite (tests/benchruns.py)
        code, runs = benches.shared_script(code)
        for run in (r for r in runs if r.proc.returncode != 0):
            pytest.fail(f"{block.name}: {' '.join(run.proc.args[1:])} exited "
                        f"{run.proc.returncode}\n--- stdout (tail):\n{run.proc.stdout[-3000:]}"
                        f"\n--- stderr (tail):\n{run.proc.stderr[-3000:]}", pytrace=False)
    _execute(block, block.lang, code, work, "the block")


def _execute(block: Block, lang: str, code: str, work: Path, what: str) -> None:
    script = work / f".block_{block.line}.{'py' if lang == 'python' else 'sh'}"
    script.write_text(code)
    argv = [sys.executable, str(script)] if lang == "python" else \
        ["bash", "-euo", "pipefail", str(script)]
    try:
        proc = subprocess.run(argv, cwd=work, env=_env(), capture_output=True, text=True,
                              timeout=block.timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: {what} ran past {block.timeout} s. Fix: smaller sizes "
                    "(<!-- test: replace ... -->) or <!-- test: timeout N -->")
    if proc.returncode != 0:
        pytest.fail(f"{block.name}: {what} exited {proc.returncode}\n--- code:\n{code}"
                    f"--- stdout (tail):\n{proc.stdout[-3000:]}\n--- stderr (tail):\n"
                    f"{proc.stderr[-3000:]}", pytrace=False)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block(block: Block, folders, tmp_path_factory, bench_runs: BenchRuns) -> None:
    state = _folder(folders, block.page, tmp_path_factory)
    # run alone (-k), a block still gets what the page's earlier blocks made
    # (an earlier block that failed has its own failing test: it is not run again)
    for earlier in (b for b in BLOCKS if b.page == block.page and b.line < block.line):
        if earlier.skip is None and earlier.line not in state["done"]:
            state["done"].add(earlier.line)
            _run(earlier, state["dir"], bench_runs)
    if block.skip is not None:
        pytest.skip(f"{block.name} ({block.first_line[:60]}): {block.skip}")
    state["done"].add(block.line)
    _run(block, state["dir"], bench_runs)


def test_skipped_blocks_are_the_listed_few() -> None:
    """A skip is a listed exception with its reason, not a way to quiet a failing block."""
    skipped = [b for b in BLOCKS if b.skip is not None]
    found = {f"{b.page}:{b.first_line}": b.skip for b in skipped}
    assert found == SKIPS, ("the skipped blocks changed; a new skip needs a line in SKIPS "
                            f"with its reason (shrink sizes with replace instead): {found}")
    assert len(skipped) == SKIP_COUNT, [b.name for b in skipped]
    assert all(reason.strip() for reason in found.values())


def test_every_page_has_its_blocks_counted() -> None:
    """The pages that show commands have blocks this test runs (not all written as text)."""
    pages = {b.page for b in BLOCKS}
    for page in ("README.md", "docs/packing.md", "docs/loading.md", "docs/training.md",
                 "docs/benchmarks.md"):
        assert page in pages, f"{page} has no ```bash/```python block to run"


def test_directives_are_checked(tmp_path: Path) -> None:
    """A directive that does not apply is an error, not a block run as written."""
    cases = {
        "<!-- test: skip -->\n```bash\ntrue\n```\n": "expected skip (reason)",
        "<!-- test: frobnicate -->\n```bash\ntrue\n```\n": "expected skip (reason)",
        "<!-- test: timeout 5 -->\n\n```bash\ntrue\n```\n": "right above",
        "<!-- test: replace \"a\" \"b\" -->\n```yaml\na: 1\n```\n": "not run",
        "text\n<!-- test: timeout 5 -->\n": "no block after it",
    }
    for text, message in cases.items():
        page = tmp_path / "page.md"
        page.write_text(text)
        with pytest.raises(DirectiveError, match=re.escape(message)):
            page_blocks(page, tmp_path)
    page.write_text("<!-- test: replace \"--n 8\" \"--n 2\" -->\n```sh\nrun --n 3\n```\n")
    (block,) = page_blocks(page, tmp_path)
    with pytest.raises(DirectiveError, match="not in the block"):
        block.runnable()
    page.write_text("<!-- test: replace \"--n 8\" \"--n 2\" \"a b\" \"c\" -->\n"
                    "<!-- test: timeout 7 -->\n```python\nrun --n 8 a b\n```\n")
    (block,) = page_blocks(page, tmp_path)
    assert (block.runnable(), block.timeout, block.lang) == ("run --n 2 c\n", 7, "python")
