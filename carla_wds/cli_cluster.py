"""The cluster commands of `carla-wds` (pack/plan_parts.py, pack/cluster.py, pack/inplace.py):
`plan` and `pack-status`, and what `pack --plan` and `merge --in-place` run. Kept apart from
cli.py so that each stays a readable size; cli.py adds these to its group."""
from __future__ import annotations

import click

from .pack.datasets import DEFAULT_LAYOUT, builtin_layouts
from .pack.errors import PackError
from .remote import RemoteError
from .schema import SchemaError

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
        click.echo(f"wrote {where}: {doc['episodes']} episodes, {doc['bytes'] / 1e9:.2f} GB in "
                   f"{parts} parts of {min(sizes) / 1e9:.2f}-{max(sizes) / 1e9:.2f} GB "
                   f"(max/mean {max(sizes) * parts / max(1, sum(sizes)):.3f}); submit with "
                   f"sbatch --array=0-{parts - 1} tools/slurm/pack_array.sbatch")
    return plan


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
    click.echo(", ".join(f"{len(v)} {k}" for k, v in by.items()) + f" of {len(states)} parts")
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
    click.echo(f"merged {len(m['merged_from'])} parts in place: {m['total_samples']} samples, "
               f"{len(m['shards'])} shards; wrote {part_dirs[0]}/manifest.json only")
    return m
