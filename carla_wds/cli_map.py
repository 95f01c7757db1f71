"""`carla-wds pack-map` (issue 42): a dataset's shipped maps -> a typed map pack of plain
arrays with a manifest of the sources' sha256 (the dataset's own pack_maps does the work; the
registry in pack/datasets says which layouts ship maps). Kept apart from cli.py, which adds it."""
from __future__ import annotations

import click

from .pack.datasets import map_layouts, map_packer
from .pack.errors import PackError


def map_commands(limit_option) -> list[click.Command]:
    """The command, with cli.py's --limit option (which sets the process's bounds)."""
    layouts = map_layouts()

    @click.command("pack-map")
    @click.argument("maps_dir", type=click.Path(file_okay=False))
    @click.argument("out", type=click.Path(file_okay=False))
    @click.option("--layout", type=click.Choice(layouts), default=layouts[0],
                  show_default=True, help="The dataset whose maps MAPS_DIR holds.")
    @click.option("--allow-pickle-input", is_flag=True,
                  help="The maps are pickles: read them (from a local source you trust) with "
                       "carla-wds' own pickle reader, which runs nothing; OUT never holds one.")
    @click.option("--clips", type=click.Path(file_okay=False), default=None,
                  help="A folder of the dataset's clips: refuse, before writing, if a clip "
                       "names a town that has no map.")
    @limit_option
    def pack_map_cmd(maps_dir, out, layout, allow_pickle_input, clips) -> None:
        """Pack MAPS_DIR (Bench2Drive's maps/<Town>_HD_map.npz) into OUT: per town, lane
        polylines with their types and trigger volumes with theirs as plain arrays
        (<Town>.npz, no pickle), and maps.json recording each source file's sha256. A
        refused map (a forbidden pickle, a limit, a NaN point, a clip's town without a map)
        is one line naming the file or town, and OUT is not written."""
        try:
            report = map_packer(layout)(maps_dir, out, allow_pickle=allow_pickle_input,
                                        clips=clips)
        except (PackError, FileNotFoundError, FileExistsError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(report.line())
    return [pack_map_cmd]
