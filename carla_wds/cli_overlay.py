"""The overlay commands of `carla-wds` (issue 30): `pack-overlay` (pack/overlay.py) and
`synth-overlay` (pack/synth/overlays.py). Kept apart from cli.py, which adds them."""
from __future__ import annotations

import click

from .pack.datasets.overlays import overlay_kinds
from .pack.errors import PackError
from .words import counted

KIND_HELP = "The overlay's kind: where its files live and how one names a base frame."


def overlay_commands(limit_option) -> list[click.Command]:
    """The commands, with cli.py's --limit option (which sets the process's bounds)."""
    @click.command("pack-overlay")
    @click.argument("overlay_dir")
    @click.argument("base_pack")
    @click.argument("out")
    @click.option("--kind", required=True, type=click.Choice(overlay_kinds()), help=KIND_HELP)
    @limit_option
    def pack_overlay_cmd(overlay_dir, base_pack, out, kind) -> None:
        """Write OUT: the KIND entries under OVERLAY_DIR as shards keyed by BASE_PACK's
        samples (one overlay shard per base shard, same keys, same order; null where a sample
        has no entry), without repacking the base. Entries naming no base sample are counted
        and listed in OUT/unmatched.json. Load with CARLAWebData(BASE_PACK,
        overlays=[OUT])."""
        from .pack.overlay import pack_overlay
        try:
            report = pack_overlay(overlay_dir, base_pack, out, kind)
        except (PackError, FileNotFoundError, FileExistsError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(report.line())

    @click.command("synth-overlay")
    @click.argument("raw_dir")
    @click.argument("out")
    @click.option("--kind", required=True, type=click.Choice(overlay_kinds()), help=KIND_HELP)
    @click.option("--coverage", default=0.5, show_default=True, type=click.FloatRange(0, 1),
                  help="Share of frames that get an entry (drawn per frame, seeded).")
    @click.option("--unmatched", default=2, show_default=True, type=click.IntRange(0),
                  help="Entries of a route no base holds (pack-overlay lists them).")
    @click.option("--seed", default=0, show_default=True, type=int)
    def synth_overlay_cmd(raw_dir, out, kind, coverage, unmatched, seed) -> None:
        """Write a synthetic KIND tree in its project's structure for the routes (clips)
        `carla-wds synth` wrote under RAW_DIR."""
        from .pack.synth.overlays import raw_routes, synth_overlay
        routes = raw_routes(raw_dir, kind)
        if not routes:
            raise click.ClickException(f"{raw_dir}: no routes (clips) of `carla-wds synth` "
                                       "found. Fix: pass the folder synth wrote")
        files = synth_overlay(out, kind, routes, raw_dir, coverage, unmatched, seed)
        click.echo(f"wrote {counted(len(files), f'{kind} entry')} for "
                   f"{counted(len(routes), 'route')} to {out}")
    return [pack_overlay_cmd, synth_overlay_cmd]
