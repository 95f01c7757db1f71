"""The cluster commands of `carla-wds` (pack/plan_parts.py, pack/cluster.py, pack/inplace.py):
`plan` and `pack-status`, and what `pack --plan` and `merge --in-place` run. Kept apart from
cli.py so that each stays a readable size; cli.py adds these to its group."""
from __future__ import annotations

import click

from .pack.datasets import DEFAULT_LAYOUT, builtin_layouts
from .pack.errors import PackError
from .remote import RemoteError
from .schema import SchemaError
from .words import counted

USER_ERRORS = (PackError, SchemaError, FileNotFoundError, FileExistsError, RemoteError)


def plan_command(dataset_options, given_options):
    """`carla-wds plan INPUT OUT --layout L --parts P` (dataset options as `pack` takes them)."""
    @click.command("plan")
    @click.argument("input_dir")
    @click.argument("out")
    @click.option("--layout", default=DEFAULT_LAYOUT, show_default=True,
                  help=f"{', '.join(builtin_layouts())}, or a layout .yaml path.")
    @click.option("--parts", type=int, required=True,
                  help="Parts to split into: several times the processes you will run, so "
                       "stragglers and lost nodes are absorbed.")
    @dataset_options
    def plan(input_dir, out, layout, parts, **kw) -> None:
        """Split INPUT_DIR's episodes into PARTS parts of nearly equal bytes (largest first,
        into the lightest part) and write OUT/plan.json, with the input's fingerprint, for
        `pack --plan OUT/plan.json --part auto` (one SLURM array task per part)."""
        from .pack.options import PackOptions
        from .pack.plan_parts import make_plan, write_plan
        try:
            opts = PackOptions(layout=layout, dataset_options=given_options(kw))
            opts.validate()
            doc = make_plan(input_dir, opts, parts)
            where = write_plan(out, doc)
        except (*USER_ERRORS, ValueError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        sizes = [p["bytes"] for p in doc["part_list"]]
        click.echo(f"wrote {where}: {counted(doc['episodes'], 'episode')}, "
                   f"{doc['bytes'] / 1e9:.2f} GB in {counted(parts, 'part')} of "
                   f"{min(sizes) / 1e9:.2f}-{max(sizes) / 1e9:.2f} GB "
                   f"(max/mean {max(sizes) * parts / max(1, sum(sizes)):.3f})")
        click.echo(f"run it: carla-wds slurm-script --out pack_array.sbatch, then sbatch "
                   f"--array=0-{parts - 1} pack_array.sbatch {input_dir} {out} --layout {layout}"
                   f" (without SLURM: carla-wds slurm-script --xargs --out pack_xargs.sh)")
    return plan


SCRIPTS = {False: "pack_array.sbatch", True: "pack_xargs.sh"}


def script_text(xargs: bool = False) -> bytes:
    """The runner shipped in carla_wds/cluster_scripts/: the SLURM array script, or with
    `xargs` the runner without SLURM (xargs -P here, or ssh to HOSTS)."""
    from importlib.resources import files
    return files("carla_wds").joinpath("cluster_scripts", SCRIPTS[xargs]).read_bytes()


@click.command("slurm-script")
@click.option("--xargs", "xargs", is_flag=True,
              help="The runner without SLURM (pack_xargs.sh: PROCS parts at a time here, or "
                   "over ssh to HOSTS) instead of the SLURM array script.")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="File to write (made executable); default: print to stdout.")
def slurm_script(xargs, out) -> None:
    """Print or write the script that packs a plan's parts: pack_array.sbatch (one part per
    SLURM array task) or, with --xargs, pack_xargs.sh. Both run the carla-wds on PATH (or
    $CARLA_WDS) from any folder; see docs/cluster.md."""
    text = script_text(xargs)
    if out is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path
    Path(out).write_bytes(text)
    Path(out).chmod(0o755)      # run as ./pack_xargs.sh; sbatch needs no bit but does no harm
    click.echo(f"wrote {out}", err=True)


@click.command("pack-status")
@click.argument("out")
@click.option("--stale", default=3600.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds after which a part's untouched journal counts as failed (a "
                   "killed process writes no failure record).")
def pack_status(out, stale) -> None:
    """Which parts of OUT's plan are done, running, failed or missing, and the parts still to
    run as an sbatch --array= list."""
    from .pack.cluster import array_spec, part_states
    from .pack.plan_parts import part_dir
    try:
        states = part_states(out, stale)
    except USER_ERRORS as exc:
        raise click.ClickException(str(exc)) from None
    by: dict[str, list[int]] = {"done": [], "running": [], "failed": [], "missing": []}
    for i, (state, detail) in sorted(states.items()):
        by[state].append(i)
        if state in ("failed", "running"):
            click.echo(f"{state:8} {part_dir(i, len(states))}: {detail}")
    click.echo(", ".join(f"{len(v)} {k}" for k, v in by.items())
               + f" of {counted(len(states), 'part')}")
    todo = by["failed"] + by["missing"]
    if todo:
        click.echo(f"--array={array_spec(todo)}")


def run_plan_part(input_dir, output_dir, plan, part, opts) -> dict | None:
    """`pack --plan`: the part's manifest, or None when the part was complete already."""
    from .pack.cluster import pack_part
    i, manifest = pack_part(input_dir, output_dir, plan, part, opts)
    if manifest is None:
        click.echo(f"part {i} is complete already; nothing to do")
    return manifest


def run_merge_in_place(part_dirs, out_dir, deep, remote) -> dict:
    """`merge --in-place OUT`: exactly one folder (or prefix) and no --out."""
    from .pack.inplace import merge_in_place
    if len(part_dirs) != 1 or out_dir is not None:
        raise click.UsageError("merge --in-place takes one OUT (the folder or s3:// prefix "
                               "holding plan.json and parts/) and no --out")
    m = merge_in_place(part_dirs[0], deep=deep, remote=remote)
    click.echo(f"merged {counted(len(m['merged_from']), 'part')} in place: "
               f"{counted(m['total_samples'], 'sample')}, {counted(len(m['shards']), 'shard')}; "
               f"wrote {part_dirs[0]}/manifest.json only")
    return m
