"""The `carla-wds` command line: thin click wrappers over library functions."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from . import __version__
from .bytesize import BYTES
from .pack.datasets import DEFAULT_LAYOUT, all_options, builtin_layouts, dataset_for
from .pack.errors import PackError
from .pack.synth import synth_layouts
from .remote import RemoteError
from .words import counted
from .schema import IMAGE_FORMATS, SchemaError

# Errors about the user's input or folders: shown as "Error: message", never as a traceback.
USER_ERRORS = (PackError, SchemaError, FileNotFoundError, FileExistsError, RemoteError)


def _layouts_help(names: list[str], head: str, tail: str) -> str:
    """Layouts named from a registry (never a stale list)."""
    return f"{head}{', '.join(names)}{tail}"


def _dataset_options(command):
    """Add each registered dataset's own pack options (pack/datasets: DatasetOption) to
    `command`, spelled and explained by the dataset that owns them."""
    for o in reversed(all_options()):
        kind = click.Choice(list(o.choices)) if o.choices else o.type
        command = click.option(o.flag, o.name, type=kind, default=o.default,
                               show_default=o.show_default, help=o.help)(command)
    return command


def _given_dataset_options(kw: dict) -> dict:
    """Pop the dataset options out of a command's keywords: those not at their default, each
    parsed as its dataset says (a comma list, ...)."""
    given = {}
    for o in all_options():
        value = kw.pop(o.name)
        if value != o.default:
            given[o.name] = o.parse(value) if o.parse and value is not None else value
    return given


def _pair(value: str | None, form: str = "HxW", example: str = "256x512"
          ) -> tuple[int, int] | None:
    """'AxB' -> (A, B): every size option is HxW (height x width), as image_size."""
    if value is None:
        return None
    try:
        a, b = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{value!r}; expected {form} such as {example}") from None
    return a, b


def _part(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        i, n = (int(v) for v in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r}; expected i/N such as 0/4") from None
    return i, n


def _set_limits(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    """--limit NAME=N: this process's bounds on what one input file may make it allocate."""
    from . import limits
    try:
        limits.set_active(limits.DEFAULT.with_overrides(values))
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


limit_option = click.option(
    "--limit", multiple=True, metavar="NAME=N", expose_value=False, callback=_set_limits,
    help="Raise a bound on what one input file may make carla-wds allocate or decompress "
         "(repeatable), e.g. --limit lidar_points=8e6. Names and defaults: README, "
         "'Security model'.")


@click.group()
@click.version_option(__version__, "--version", prog_name="carla-wds")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """Pack, verify, inspect, load and train on CARLA driving data as WebDataset shards."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("input_dir", type=click.Path(file_okay=False))
@click.argument("output_dir", type=click.Path(file_okay=False))
@click.option("--layout", default=DEFAULT_LAYOUT, show_default=True,
              help=_layouts_help(builtin_layouts(), "", ", or a layout .yaml path."))
@click.option("--pred-len", type=int, default=None,
              help="Future waypoints; default the layout's 2 s horizon (4 at 2 Hz, 8 at 4 Hz).")
@click.option("--max-samples", default=1000, show_default=True, help="Samples per shard.")
@click.option("--max-bytes", type=BYTES, default=None,
              help="Bytes per shard (approximate upper bound), e.g. 1G, 512M or 1048576.")
@click.option("--route-shards", is_flag=True,
              help="End shards where routes end: a shard holding at least half of "
                   "--max-samples closes at the next route's start, so few routes span shards "
                   "and history windows (history=K) still shuffle whole shards.")
@click.option("--prefix", default="shard", show_default=True)
@click.option("--image-format", type=click.Choice(list(IMAGE_FORMATS)), default=None,
              help="Re-encode images; default copies the source bytes verbatim. raw: decode "
                   "once here and store uint8 HxWx3 .npy (no decode when loading; larger "
                   "shards).")
@click.option("--quality", default=95, show_default=True, help="JPEG quality.")
@click.option("--resize", default=None, help="HxW: resize images before encoding.")
@click.option("--workers", default=1, show_default=True)
@click.option("--part", default=None, help="i/N: pack part i of N (for many machines); with "
              "--plan: i, or auto (SLURM_ARRAY_TASK_ID).")
@click.option("--plan", default=None, help="A plan.json from `carla-wds plan`: pack its part "
              "--part into OUTPUT_DIR/parts/<i>/, resuming it if it was interrupted.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True)
@click.option("--check-images", is_flag=True, help="Fully decode every image.")
@click.option("--dot-replacement", default=None, help="Map dots in route names to this string.")
@click.option("--allow-pickle-input", is_flag=True,
              help="Read pickled raw .npy files (some layouts' supervision or LiDAR) from a "
                   "local source you trust; shards never hold pickles.")
@click.option("--all-frames", is_flag=True,
              help="Keep every frame with a full future. Default: the frames the layout's own "
                   "project's loader serves (some skip a route's first frames, some end "
                   "earlier); the manifest's sample_rule says.")
@click.option("--stage", default=None, type=click.Path(file_okay=False),
              help="OUTPUT_DIR s3://...: the local folder each shard is written to before its "
                   "upload (at most 3 shards at a time) and the journal --resume reads; default "
                   "$XDG_CACHE_HOME/carla-wds/stage/<hash of the URL>.")
@click.option("--resume", is_flag=True, help="Continue an interrupted pack in OUTPUT_DIR.")
@click.option("--overwrite", is_flag=True, help="Replace what OUTPUT_DIR holds.")
@click.option("--fsync/--no-fsync", default=True, show_default=True,
              help="fsync each shard before it gets its name (durable against power loss). "
                   "--no-fsync is faster; shards stay atomic against a killed pack.")
@_dataset_options
@click.option("--read-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.1),
              help="s3:// INPUT_DIR or OUTPUT_DIR: seconds a read may wait for bytes.")
@click.option("--retries", default=3, show_default=True, type=click.IntRange(min=0),
              help="s3:// INPUT_DIR or OUTPUT_DIR: further attempts per object after a failure.")
@click.option("--spool-bytes", type=BYTES, default="1G", show_default=True,
              help="Archived episodes (clips, route .tar.gz archives): bytes of one archive "
                   "held in memory, e.g. 512M; the rest goes to one temporary file.")
@limit_option
def pack(input_dir, output_dir, resize, part, plan, **kw) -> None:
    """Pack raw CARLA route folders or their .tar.gz/.zip archives (or Bench2Drive clips and
    their .tar.gz) into WebDataset shards plus manifest.json. INPUT_DIR is a folder or (for
    archives) an s3:// prefix. OUTPUT_DIR is a folder or an s3:// prefix (credentials and
    endpoint from the AWS environment: AWS_PROFILE or AWS_ACCESS_KEY_ID/..., AWS_ENDPOINT_URL)."""
    from .cli_cluster import run_plan_part
    from .pack.packer import PackOptions
    from .pack.packer import pack as run_pack
    opts = PackOptions(resize=_pair(resize), part=None if plan else _part(part),
                       dataset_options=_given_dataset_options(kw), **kw)
    try:
        manifest = run_plan_part(input_dir, output_dir, plan, part, opts) if plan else \
            run_pack(input_dir, output_dir, opts)
    except (*USER_ERRORS, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if manifest is None:   # a plan's part that was complete already
        return
    c = manifest["counts"]
    click.echo(f"{counted(c['samples'], 'sample')} in {counted(len(manifest['shards']), 'shard')}; "
               f"{counted(c['frames'], 'frame')} found, {counted(c['tail_frames'], 'route tail')}, "
               f"{c['head_frames']} + "
               f"{c['loader_tail_frames']} left out by the loader's rule (head + end), "
               f"{c['skipped']} skipped "
               f"(NaN theta: {c['nan_theta']}, VOID command: {c['void_command']})")
    own = dataset_for(opts.layout).summary(manifest)
    if own:
        click.echo(own)


@main.command()
@click.argument("part_dirs", nargs=-1, required=True)
@click.option("--out", "out_dir", default=None,
              help="Empty folder or s3:// prefix for the merged pack.")
@click.option("--in-place", is_flag=True,
              help="PART_DIRS is one OUT of `carla-wds plan`: write OUT/manifest.json naming "
                   "the parts' shards where they are (nothing copied), each checked.")
@click.option("--deep", is_flag=True, help="--in-place: check each shard's sha256 too.")
@click.option("--prefix", default="shard", show_default=True)
@click.option("--read-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.1),
              help="s3:// parts or output: seconds a read may wait for bytes.")
@click.option("--retries", default=3, show_default=True, type=click.IntRange(min=0),
              help="s3:// parts or output: further attempts per object after a failure.")
def merge(part_dirs, out_dir, in_place, deep, prefix, read_timeout, retries) -> None:
    """Combine `pack --part i/N` outputs (folders or s3:// prefixes) into one folder or s3://
    prefix and manifest; shards are copied server-side within a store, and each is checked.
    With --in-place, the parts of a plan's OUT get one manifest and no shard is copied."""
    from .cli_cluster import run_merge_in_place
    from .pack.audit import merge as run_merge
    from .remote import RemoteOptions
    remote = RemoteOptions(read_timeout=read_timeout, retries=retries)
    try:
        if in_place:
            run_merge_in_place(part_dirs, out_dir, deep, remote)
            return
        if out_dir is None:
            raise click.UsageError("merge needs --out (or --in-place OUT)")
        m = run_merge(list(part_dirs), out_dir, prefix, remote)
    except USER_ERRORS as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"merged {counted(len(part_dirs), 'part')}: "
               f"{counted(m['total_samples'], 'sample')}, {counted(len(m['shards']), 'shard')} "
               f"in {out_dir}")


@main.command()
@click.argument("directory")
@click.option("--deep", is_flag=True, help="Decode and validate every sample.")
@click.option("--read-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds an http(s) or s3 read may wait for bytes.")
@click.option("--retries", default=3, show_default=True, type=click.IntRange(min=0),
              help="Further attempts per remote object after a failure.")
@limit_option
def verify(directory, deep, read_timeout, retries) -> None:
    """Check shard counts and sha256 against the manifest (a folder, a path, an http(s)://
    URL or an s3:// prefix or manifest URL; s3 credentials from the AWS environment)."""
    from .pack.audit import verify as run_verify
    from .remote import RemoteOptions
    try:
        problems = run_verify(directory, deep=deep, remote=RemoteOptions(
            read_timeout=read_timeout, retries=retries))
    except USER_ERRORS as exc:
        raise click.ClickException(str(exc)) from None
    for p in problems:
        click.echo(f"FAIL {p}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"OK {directory}" + (" (deep)" if deep else ""))


@main.command()
@click.argument("directory")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--read-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a remote read may wait for bytes.")
@click.option("--retries", default=3, show_default=True, type=click.IntRange(min=0),
              help="Further attempts per remote object after a failure.")
@limit_option
def inspect(directory, as_json, read_timeout, retries) -> None:
    """Summarise a pack (a folder, a manifest path or URL, an s3:// prefix): samples, shards,
    sizes, commands, speeds."""
    from .pack.audit import summary
    from .remote import RemoteOptions
    try:
        s = summary(directory, RemoteOptions(read_timeout=read_timeout, retries=retries))
    except USER_ERRORS as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    click.echo(f"{counted(s['samples'], 'sample')} in {counted(s['shards'], 'shard')}, "
               f"{s['bytes'] / 1e6:.1f} MB "
               f"(shards {s['shard_bytes_min'] / 1e6:.2f}-{s['shard_bytes_max'] / 1e6:.2f} MB)")
    click.echo(f"layout {s['layout']}, cameras {s['cameras']}, pred_len {s['pred_len']}, "
               f"skipped {s['skipped']}")
    click.echo("commands: " + ", ".join(f"{k} {v}" for k, v in s["commands"].items()))
    for name, what in s["fields"].items():   # what fields=[...] can select
        click.echo(f"field {name}: {what}")
    if s["sequence"]:
        q = s["sequence"]
        n = q["continuing_shards"]
        click.echo(f"routes: frame step {q['frame_step']}, {counted(q['gaps'], 'gap')} inside "
                   f"routes, {counted(n, 'shard')} go{'es' * (n == 1)} on with the route before "
                   "(history=K)")
    for name, sizes in (s["buckets"] or {}).items():   # what a mix can weight or filter
        click.echo(f"bucket {name}: " + ", ".join(f"{v} {n}" for v, n in sizes.items()))
    sp = s["speed"]
    click.echo(f"speed m/s: mean {sp['mean']:.2f} std {sp['std']:.2f} min {sp['min']:.2f} "
               f"max {sp['max']:.2f}, stopped {100 * sp['stopped_share']:.0f}%")


@main.command()
@click.argument("out_dir")
@click.option("--layout", default=DEFAULT_LAYOUT, show_default=True,
              help=_layouts_help(synth_layouts(), "One of ", "."))
@click.option("--episodes", default=4, show_default=True,
              help="Routes (clips) to write, each a separate drive.")
@click.option("--frames", default=40, show_default=True,
              help="Frames per route, at the layout's rate (pack needs more than --pred-len).")
@click.option("--seed", default=0, show_default=True,
              help="Random seed of the routes: the same seed writes the same routes.")
@click.option("--image-size", default=None,
              help="HxW (height x width, as image_size everywhere), e.g. 90x320; default: the "
                   "layout's real camera size.")
@click.option("--archives", "form", default=None, metavar="FORM",
              help="Write the routes as archives, in a form their dataset is distributed in "
                   "(an unknown FORM lists the layout's forms); default: route folders.")
def synth(out_dir, layout, episodes, frames, seed, image_size, form) -> None:
    """Write procedural CARLA-like routes in the raw layout (no simulator needed)."""
    from .pack.synth import synth_archives, synth_dataset
    size = _pair(image_size, "HxW", "300x400")
    try:
        if form is not None:
            archives = synth_archives(out_dir, layout, form, episodes=episodes, frames=frames,
                                      seed=seed, image_size=size)
            click.echo(f"wrote {counted(episodes, 'route')} of {counted(frames, 'frame')} as "
                       f"{counted(len(archives), form + ' archive')} to {out_dir}")
            return
        routes = synth_dataset(out_dir, layout, episodes=episodes, frames=frames, seed=seed,
                               image_size=size)
    except (ValueError, FileExistsError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {counted(len(routes), 'route')} of {counted(frames, 'frame')} to {out_dir}")


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--config", default=None,
              help="A shipped config (" + ", ".join(sorted(
                  p.stem for p in (Path(__file__).parent / "train" / "configs").glob("*.yaml")))
              + "; the files in configs/train/) or a YAML file of your own.")
@click.argument("overrides", nargs=-1)
def train(config, overrides) -> None:
    """Train the waypoint model in one process (use torchrun -m carla_wds.train for DDP)."""
    from .train.config import load_config
    from .train.errors import USER_ERRORS as TRAIN_ERRORS
    from .train.errors import one_line
    from .train.loop import run_training
    try:
        run_training(load_config(config, list(overrides)))
    except TRAIN_ERRORS as exc:
        raise click.ClickException(one_line(exc)) from None


@main.command()
@click.argument("shards")
@click.option("--checkpoint", default=None, help="checkpoint.pt to draw predictions from.")
@click.option("--out", required=True, help="PNG to write.")
@click.option("-n", "n", default=6, show_default=True,
              help="Samples to show, chosen across routes, commands and speeds (as view).")
@limit_option
def show(shards, checkpoint, out, n) -> None:
    """Montage of samples: cameras plus a bird's-eye plot of waypoints and target point."""
    from .train.errors import USER_ERRORS as TRAIN_ERRORS
    from .train.errors import one_line
    from .train.show import show as run_show
    from .view.pick import spread_batch
    try:
        click.echo(f"wrote {run_show(shards, out, checkpoint=checkpoint, n=n, pick=spread_batch)}")
    except (*USER_ERRORS, *TRAIN_ERRORS, ValueError) as exc:
        raise click.ClickException(one_line(exc)) from None


@main.command()
@click.argument("shards")
@click.option("--out", required=True, help="HTML file to write (pictures inlined: one file).")
@click.option("-n", "n", default=12, show_default=True,
              help="Samples to draw, chosen across routes, commands and speeds.")
@click.option("--image-size", default=None,
              help="HxW of the cameras in the report; default: the pack's, 160 px high.")
@limit_option
def view(shards, out, n, image_size) -> None:
    """Static HTML report of a pack: samples across routes, commands and speeds (cameras,
    boxes, bird's-eye view in the layout's axes) and histograms of the labels."""
    from .train.errors import one_line
    from .view import view as write_view
    try:
        click.echo(f"wrote {write_view(shards, out, n=n, image_size=_pair(image_size))}")
    except (*USER_ERRORS, ValueError) as exc:
        raise click.ClickException(one_line(exc)) from None


@main.command()
@click.argument("run_dir")
@click.option("--out", default=None, help="PNG to write (default RUN_DIR/curves.png).")
def plot(run_dir, out) -> None:
    """Loss and ADE/FDE curves of a training run as a PNG."""
    from .train.viz import plot_run
    try:
        click.echo(f"wrote {plot_run(run_dir, out)}")
    except (FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def _add_cluster_commands() -> None:
    from .cli_cluster import pack_status, plan_command, slurm_script
    main.add_command(plan_command(_dataset_options, _given_dataset_options))
    main.add_command(pack_status)
    main.add_command(slurm_script)
    from .cli_map import map_commands
    from .cli_overlay import overlay_commands
    for command in [*overlay_commands(limit_option), *map_commands(limit_option)]:
        main.add_command(command)


_add_cluster_commands()


if __name__ == "__main__":
    main()
