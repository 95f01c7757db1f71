"""MkDocs hooks: write reference/layouts.md, one section per built-in layout, and show
click's unset flag default as False on the CLI page.

Generated at build time from the package's registry (carla_wds.pack.datasets.builtin_layouts),
so a layout added or changed there is on the page without an edit here: a YAML layout shows its
shipped file verbatim, a code dataset its docstring and its own pack options.
"""
from __future__ import annotations

import inspect
from pathlib import Path

from mkdocs.structure.files import File, Files

PAGE = "reference/layouts.md"


def _options(dataset) -> list[str]:
    rows = [f"| `{o.flag}` | `{o.default!r}` | {o.help} |" for o in dataset.options]
    return ["| option | default | what it does |", "|---|---|---|", *rows] if rows else []


def _section(name: str) -> list[str]:
    from carla_wds.pack.datasets import dataset_for
    from carla_wds.pack.datasets.routes.layouts import LAYOUT_DIR
    yaml_file = LAYOUT_DIR / f"{name}.yaml"
    out = [f"## `{name}`", ""]
    if yaml_file.is_file():
        out += [f"`carla-wds pack RAW OUT --layout {name}` reads route folders as this file "
                f"says (`carla_wds/pack/datasets/routes/layouts/{yaml_file.name}`):", "",
                "```yaml", yaml_file.read_text().rstrip(), "```", ""]
    else:
        dataset = dataset_for(name)
        doc = inspect.getdoc(inspect.getmodule(type(dataset))) or ""
        out += [f"A code dataset (`{type(dataset).__module__}`), not a YAML file:", "",
                doc, "", *_options(dataset), ""]
    return out


def render() -> str:
    """The page's Markdown."""
    from carla_wds.pack.datasets import builtin_layouts
    names = builtin_layouts()
    lines = ["# Built-in layouts", "",
             "Every `--layout` name shipped with the package (generated from the registry at "
             "build time). A layout YAML of your own is passed as a path, `--layout my.yaml`: "
             "copy the closest one below and edit it ([packing](../packing.md)).", "",
             ", ".join(f"[`{n}`](#{n})" for n in names), ""]
    for name in names:
        lines += _section(name)
    return "\n".join(lines) + "\n"


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, PAGE, content=render()))
    return files


def on_page_content(html: str, page, config, files) -> str:
    # mkdocs-click 0.9 prints a flag without a default (click >= 8.3 keeps it as an UNSET
    # sentinel) as `Sentinel.UNSET`; a flag that is not given is False
    if page.file.src_uri == "reference/cli.md":
        html = html.replace("<code>Sentinel.UNSET</code>", "<code>False</code>")
    return html
