"""The documentation site builds with `mkdocs build --strict` (mkdocs.yml): a broken link, a
missing page in the nav, or an API reference (mkdocstrings `::: name`, mkdocs-click) that no
longer resolves fails the suite, not only a later docs deploy."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _need_mkdocs() -> None:
    # never a skip: CI must build the site (make install installs the docs extra)
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"{exc}: the docs extra is missing. Fix: make install "
                    "(pip install -e '.[docs]' -c constraints.txt)")


def _build(out: Path) -> subprocess.CompletedProcess:
    _need_mkdocs()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = _build(out)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def _text(page: Path) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", page.read_text()).split())


def test_every_doc_page_is_built_and_in_the_nav(site: Path) -> None:
    pages = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md"))
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in pages:
        assert str(page) in nav, f"docs/{page} is not in mkdocs.yml's nav"
        built = site / page.with_suffix("") / "index.html" if page.name != "index.md" \
            else site / page.parent / "index.html"
        assert built.is_file(), f"docs/{page} was not built ({built})"


def test_api_reference_is_generated_from_the_code(site: Path) -> None:
    ref = site / "reference"
    web = _text(ref / "carla_web_data" / "index.html")
    assert "CARLAWebData" in web and "batch_size" in web and "state_dict" in web
    batch = _text(ref / "carla_batch" / "index.html")
    assert "waypoints_diff" in batch and "m/s" in batch and "follow lane" in batch
    assert "pin_memory" in batch and "to ( device" in batch
    assert "__repr__" not in batch and "extras" not in batch   # the deprecated alias's page
    # the argument docs help() shows are on the page, from the same docstring
    assert "Parameters:" in web and "samples per batch on each rank" in web
    assert "per_camera_augment" in web and "adapters.ADAPTERS" not in web
    options = _text(ref / "pack_options" / "index.html")
    assert "max_samples" in options and "samples after which a shard is closed" in options
    assert "upload.py" not in options and "pack/datasets" not in options
    cli = _text(ref / "cli" / "index.html")
    for command in ("carla-wds pack", "carla-wds verify", "carla-wds inspect", "carla-wds train",
                    "carla-wds view", "--layout"):
        assert command in cli, f"the CLI page lacks {command!r}"
    assert "Sentinel" not in cli, "the CLI page shows click's internal UNSET default"
    manifest = _text(ref / "manifest" / "index.html")
    for field in ("first_key", "steps", "sequence", "validate_manifest", "sample_rule"):
        assert field in manifest, f"the manifest page lacks {field!r}"


def test_every_loader_argument_is_documented_in_help() -> None:
    """CARLAWebData's arguments are documented once, in its docstring (carla_wds/load/
    loader_doc.py): help() shows each one's name with its description, and so does the site."""
    import inspect
    import pydoc
    from carla_wds import CARLAWebData
    shown = pydoc.render_doc(CARLAWebData, renderer=pydoc.plaintext)
    params = [p for p in inspect.signature(CARLAWebData.__init__).parameters
              if p not in ("self", "aliases")]
    missing = [p for p in params if not re.search(rf"^ \|\s+{p}: \S", shown, re.M)]
    assert not missing, f"CARLAWebData arguments help() shows no description of: {missing}"


def test_every_pack_option_is_documented_in_help() -> None:
    """PackOptions' fields are documented once, in its docstring's Attributes section, which
    help() and the site's API page both show."""
    import pydoc
    from dataclasses import fields
    from carla_wds.pack import PackOptions
    shown = pydoc.render_doc(PackOptions, renderer=pydoc.plaintext)
    missing = [f.name for f in fields(PackOptions)
               if not re.search(rf"^ \|\s+{f.name}: \S", shown, re.M)]
    assert not missing, f"PackOptions fields help() shows no description of: {missing}"


def test_the_layouts_page_lists_every_built_in_layout(site: Path) -> None:
    from carla_wds.pack.datasets import builtin_layouts
    from carla_wds.pack.datasets.routes.layouts import LAYOUT_DIR
    page = _text(site / "reference" / "layouts" / "index.html")
    for name in builtin_layouts():
        assert f"--layout {name}" in page or name in page, f"layout {name} is not on the page"
        yaml_file = LAYOUT_DIR / f"{name}.yaml"
        if yaml_file.is_file():   # the shipped YAML, verbatim (its first comment line)
            first = yaml_file.read_text().splitlines()[0].lstrip("# ").split(":")[0]
            assert first in page, f"{yaml_file.name} is not shown on the layouts page"


def test_a_broken_reference_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what catches it: a page naming an object that does not exist."""
    _need_mkdocs()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n::: carla_wds.no_such_module.Nothing\n\n"
                                   "[gone](no_such_page.md)\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\ndocs_dir: docs\nplugins:\n  - mkdocstrings\n")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(tmp_path / "site")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode != 0


def test_the_manifest_page_names_every_field_a_pack_writes(packed_tcp: Path) -> None:
    """docs/reference/manifest.md is written by hand from the code: every key of a real
    manifest (top level, a shard's, counts', sequence's, sample_rule's) must be on it."""
    import json
    page = (ROOT / "docs" / "reference" / "manifest.md").read_text()
    m = json.loads((packed_tcp / "manifest.json").read_text())
    keys = {*m, *m["shards"][0], *m["counts"], *m["sequence"], *m["sample_rule"]}
    missing = sorted(k for k in keys if f"`{k}`" not in page)
    assert not missing, f"manifest fields not described in docs/reference/manifest.md: {missing}"


def test_the_nav_lists_each_page_once() -> None:
    import yaml
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            for value in entry.values():
                yield from pages(value) if isinstance(value, list) else [value]
    listed = list(pages(nav))
    twice = sorted({p for p in listed if listed.count(p) > 1})
    assert not twice, f"mkdocs.yml's nav lists these pages more than once: {twice}"


# docs/benchmarks.md is the record of measurements, each under the change it measured
RECORDS = ("docs/benchmarks.md",)


def test_user_pages_cite_no_internal_issue_numbers() -> None:
    """"issue 27" means nothing to a user: the pages say what changed, not its ticket."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}" for p in pages
             if str(p.relative_to(ROOT)) not in RECORDS
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\bissues? ?#?\d", line, re.I)]
    assert not found, "user-facing pages cite internal issue numbers:\n" + "\n".join(found)


def test_adapter_pages_run_without_real_data() -> None:
    """Each adapter page shows the `synth` lines that make it runnable without the project's
    real data, as a visible block before its pack command, not a hidden test directive."""
    from tests.docblocks import page_blocks
    for page in sorted((ROOT / "docs" / "adapters").glob("*.md")):
        blocks = [b for b in page_blocks(page, ROOT) if b.lang == "bash"]
        first = blocks[0]
        assert "carla-wds synth" in first.code and not first.before, \
            f"{page.name}: its first block should be the visible 'no data yet?' synth lines"
        assert "data yet?" in page.read_text(), page.name
        pack = next(b for b in blocks if "carla-wds pack " in b.code)
        assert not pack.before, f"{page.name}: the pack block needs no hidden data"


def test_garage_synth_lines_on_user_pages_are_small() -> None:
    """garage's real cameras are 256x1024: a synth line without --image-size takes a minute
    where the example trains at 64x160 (docs/training.md's garage_tiny run)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    slow = [f"{p.relative_to(ROOT)}:{n}" for p in pages
            if str(p.relative_to(ROOT)) not in RECORDS
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"carla-wds synth \S+ --layout garage\b", line)
            and "--image-size" not in line]
    assert not slow, f"garage synth lines at the real 256x1024 camera size: {slow}"


def test_messages_and_built_pages_cite_no_issue_numbers(site: Path) -> None:
    """Neither a string the package shows (errors, help, logs: every string constant that is
    not a docstring) nor a built page (API docstrings, the CLI's help) cites "issue N";
    comments and developer docstrings may."""
    import ast
    pattern = re.compile(r"\bissues? ?#?\d", re.I)
    found = []
    for path in sorted((ROOT / "carla_wds").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        found += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in docs and pattern.search(n.value)]
    found += [str(page.relative_to(site)) for page in sorted(site.rglob("index.html"))
              if "benchmarks" not in page.parts and pattern.search(_text(page))]
    assert not found, f"user-facing text citing internal issue numbers: {found}"


def test_the_site_styles_names_and_long_lines(site: Path) -> None:
    """docs/stylesheets/extra.css: a table's first column (argument, option and field names)
    never breaks mid-word, and long code lines and API signatures wrap inside the page."""
    css = (site / "stylesheets" / "extra.css").read_text()
    assert "td:first-child" in css and "white-space: nowrap" in css
    assert ".doc-signature" in css and "pre-wrap" in css
    assert "stylesheets/extra.css" in (site / "adapters" / "tcp" / "index.html").read_text()
