#!/usr/bin/env bash
# The wheel, installed outside the repository, must pack and train on its own.
#
#     make wheel-check            (or: bash tools/check_wheel.sh, after make install)
#
# 1. Builds the wheel from a copy of this tree (git's tracked and untracked-not-ignored files,
#    so a stale build/ or egg-info cannot leak in) and checks that every file under carla_wds/
#    (modules, layout YAMLs, train configs) is in it.
# 2. Installs it (non-editable, --no-deps) into a fresh venv in a temporary folder outside the
#    repository. The dependencies come from $PY's site-packages (default .venv) through a .pth
#    line; .pth files there, the repo's editable finder among them, are not run, so the
#    repository's carla_wds cannot be imported: the check asserts that before installing.
# 3. From another working directory: every carla_wds module imports from the install, the
#    wheel's requirements are met, synth + pack + verify --deep for every built-in layout,
#    `carla-wds slurm-script` writes the cluster runners, which pack a plan's parts from
#    another folder, a one-epoch `carla-wds train --config tiny` (a name, not a path), and the same through
#    `torchrun --standalone --nproc_per_node 1 -m carla_wds.train --config tiny`.
#
# KEEP=1 keeps the temporary folder; PY=... picks the interpreter that has the dependencies.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd -P)"
PY="${PY:-$ROOT/.venv/bin/python}"
fail() { echo "check_wheel: FAIL: $*" >&2; exit 1; }
T0=$SECONDS
step() { echo; echo "== [$((SECONDS - T0)) s] $*"; }

[ -x "$PY" ] || fail "no interpreter at $PY. Fix: make install (creates .venv), or PY=/path/to/python"
command -v git >/dev/null || fail "git is needed to list the tree's files"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/carla-wds-wheel.XXXXXX")"
WORK="$(cd "$WORK" && pwd -P)"
case "$WORK/" in "$ROOT"/*) fail "temporary folder $WORK is inside the repository $ROOT" ;; esac
if [ "${KEEP:-0}" = 1 ]; then
    echo "check_wheel: keeping $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi
# Nothing from the caller's environment may point Python back at the repository.
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP
export PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

step "copy the tree and build the wheel"
mkdir -p "$WORK/src" "$WORK/dist"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$WORK/src"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
WHEELS=("$WORK"/dist/carla_wds-*.whl)
[ "${#WHEELS[@]}" = 1 ] && [ -f "${WHEELS[0]}" ] || fail "expected one wheel in $WORK/dist, got: ${WHEELS[*]}"
WHEEL="${WHEELS[0]}"
echo "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"

step "the wheel holds every file under carla_wds/ (modules and package data)"
"$PY" - "$WHEEL" "$WORK/src" <<'EOF'
import sys, zipfile
from pathlib import Path
wheel, src = sys.argv[1], Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
want = sorted(p.relative_to(src).as_posix() for p in (src / "carla_wds").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
missing = [w for w in want if w not in names]
data = [w for w in want if not w.endswith(".py")]
print(f"{len(want)} files under carla_wds/, {len(data)} of them package data: {data}")
if missing:
    sys.exit(f"check_wheel: FAIL: the wheel lacks {missing}. Fix: list them under "
             "[tool.setuptools.package-data] in pyproject.toml")
for need in ("carla_wds/cluster_scripts/pack_array.sbatch",
             "carla_wds/cluster_scripts/pack_xargs.sh",
             "carla_wds/pack/datasets/routes/layouts/tcp.yaml",
             "carla_wds/pack/datasets/routes/layouts/transfuser4.yaml",
             "carla_wds/train/configs/tiny.yaml"):
    if need not in names:
        sys.exit(f"check_wheel: FAIL: the wheel lacks {need}")
EOF

step "fresh venv outside the repository, dependencies from $PY"
ENV="$WORK/env"
"$PY" -m venv --without-pip "$ENV"
EPY="$ENV/bin/python"
ESITE="$("$EPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$PY" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); p["platlib"] != p["purelib"] and print(p["platlib"])' \
    > "$ESITE/_carla_wds_check_deps.pth"
mkdir -p "$WORK/cwd"
cd "$WORK/cwd"
if "$EPY" -c 'import carla_wds' 2>/dev/null; then
    fail "carla_wds imports in the fresh venv before the wheel is installed: $("$EPY" -c 'import carla_wds; print(carla_wds.__file__)')"
fi
echo "before the install, carla_wds is not importable from $WORK/cwd (good)"
"$PY" -m pip --python "$EPY" install -q --no-deps --no-index --ignore-installed "$WHEEL"
[ -x "$ENV/bin/carla-wds" ] || fail "the wheel installed no carla-wds script in $ENV/bin"
export PATH="$ENV/bin:$PATH"
[ "$(command -v carla-wds)" = "$ENV/bin/carla-wds" ] || fail "carla-wds resolves to $(command -v carla-wds)"
echo "carla-wds: $(command -v carla-wds) ($(head -1 "$ENV/bin/carla-wds"))"

step "every module imports from the install; requirements met; layouts and configs shipped"
# the source tree's layout registry: the install must register the same layouts
WANT_LAYOUTS="$(cd "$ROOT" && "$PY" -c 'from carla_wds.pack.datasets import builtin_layouts; print(" ".join(builtin_layouts()))')"
"$EPY" - "$ESITE" "$ROOT" "$WANT_LAYOUTS" <<'EOF'
import importlib, importlib.metadata as md, pkgutil, sys
from pathlib import Path
site, root = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
import carla_wds
print("carla_wds.__file__ =", carla_wds.__file__)
errors = []
mods = [carla_wds] + [importlib.import_module(m.name) for m in
                      pkgutil.walk_packages(carla_wds.__path__, "carla_wds.")]
for m in mods:
    f = Path(m.__file__).resolve()
    if not f.is_relative_to(site) or f.is_relative_to(root):
        errors.append(f"{m.__name__} loaded from {f}, not from the install in {site}")
if any("__editable__" in name for name in sys.modules):
    errors.append("an editable finder is loaded: " + str([n for n in sys.modules if "__editable__" in n]))
print(f"{len(mods)} modules, all under {site}")
from packaging.requirements import Requirement
(dist,) = [d for d in md.distributions(path=[str(site)]) if d.metadata["Name"] == "carla-wds"]
for line in dist.requires or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue                    # an extra's requirement
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        errors.append(f"requirement {line!r} is not installed")
        continue
    if not req.specifier.contains(have, prereleases=True):
        errors.append(f"requirement {line!r}: {have} is installed")
from carla_wds.pack.datasets import builtin_layouts
from carla_wds.train.config import config_path, shipped_configs
print("built-in layouts:", builtin_layouts(), "| shipped configs:", shipped_configs())
want = sys.argv[3].split()
if builtin_layouts() != want:
    errors.append(f"built-in layouts are {builtin_layouts()}, expected {want}")
if "tiny" not in shipped_configs() or not Path(config_path("tiny")).resolve().is_relative_to(site):
    errors.append(f"--config tiny does not resolve into the install: {shipped_configs()}")
if errors:
    sys.exit("check_wheel: FAIL:\n  " + "\n  ".join(errors))
EOF
carla-wds --help >/dev/null
"$EPY" -m carla_wds.train --help >/dev/null

# every YAML layout of the installed registry (the code datasets have their own steps below)
YAML_LAYOUTS="$("$EPY" -c 'from carla_wds.pack.datasets import RoutesDataset, builtin_layouts, dataset_for
print(" ".join(n for n in builtin_layouts() if isinstance(dataset_for(n), RoutesDataset)))')"
[ -n "$YAML_LAYOUTS" ] || fail "the installed registry lists no YAML layout"
for layout in $YAML_LAYOUTS; do
    step "synth + pack + verify --deep: $layout (in $PWD)"
    # some layouts ship pickled .npy (supervision, LiDAR); synth wrote these, so they are trusted
    trust="--allow-pickle-input"
    # 40 frames: SimLingo's loader leaves out 10 frames at a route's start and 14 at its end
    carla-wds synth "raw/$layout" --layout "$layout" --episodes 2 --frames 40 --seed 0 --image-size 64x96
    carla-wds pack "raw/$layout" "shards/$layout" --layout "$layout" --max-samples 8 --workers 2 $trust
    carla-wds verify --deep "shards/$layout"
    [ -f "shards/$layout/manifest.json" ] || fail "pack --layout $layout wrote no manifest.json"
done
step "synth + pack (from the .tar.gz clips) + verify --deep: bench2drive (in $PWD)"
carla-wds synth raw/b2d --layout bench2drive --episodes 2 --frames 30 --seed 0 --image-size 90x160
carla-wds pack raw/b2d/archives shards/b2d --layout bench2drive --max-samples 4 \
    --split raw/b2d/bench2drive_base_train_val_split.json --subset all
carla-wds verify --deep shards/b2d
step "synth (a .zip per route) + pack + verify --deep: lead (in $PWD)"
carla-wds synth raw/lead --layout lead --archives zip --episodes 2 --frames 30 --seed 0 --image-size 32x32
carla-wds pack raw/lead shards/lead --layout lead --max-samples 8 --workers 2 --allow-pickle-input
carla-wds verify --deep shards/lead
carla-wds inspect shards/transfuser4 >/dev/null

step "the cluster runners from the install: slurm-script writes them, they pack a plan's parts (in $PWD)"
mkdir -p runners
carla-wds slurm-script --out runners/pack_array.sbatch
carla-wds slurm-script --xargs --out runners/pack_xargs.sh
bash -n runners/pack_array.sbatch && bash -n runners/pack_xargs.sh
carla-wds plan raw/tcp planned --layout tcp --parts 2
# part 1 as SLURM array task 1 would run it, then the xargs runner packs part 0 and skips
# part 1; both from another folder, so neither script may lean on the working directory
(cd runners && SLURM_ARRAY_TASK_ID=1 bash pack_array.sbatch ../raw/tcp ../planned --layout tcp --max-samples 8)
[ -f planned/parts/00001/manifest.json ] || fail "pack_array.sbatch packed no part 1"
(cd runners && ./pack_xargs.sh ../raw/tcp ../planned 2 --layout tcp --max-samples 8) | tee runners/xargs.log
grep -q "2 done, 0 running, 0 failed, 0 missing of 2 parts" runners/xargs.log \
    || fail "pack_xargs.sh left parts of planned/ unpacked: $(cat runners/xargs.log)"
carla-wds merge --in-place planned
carla-wds verify --deep planned

check_run() {
    for f in checkpoint.pt metrics.jsonl summary.json; do
        [ -s "$1/$f" ] || fail "$2 left no $1/$f"
    done
}
step "carla-wds train --config tiny epochs=1 (one process, tcp shards)"
carla-wds train --config tiny epochs=1 eval_every=1 run_dir=runs/one \
    data.train=shards/tcp data.val=shards/tcp data.num_workers=0 data.eval_batch_size=8 data.batch_size=4
check_run runs/one "carla-wds train"

step "torchrun --standalone --nproc_per_node 1 -m carla_wds.train --config tiny (transfuser4 shards)"
"$EPY" -m torch.distributed.run --standalone --nproc_per_node 1 -m carla_wds.train --config tiny \
    epochs=1 eval_every=1 run_dir=runs/ddp data.train=shards/transfuser4 data.val=shards/transfuser4 \
    data.num_workers=1 data.eval_batch_size=8 data.batch_size=4
check_run runs/ddp "torchrun -m carla_wds.train"

step "wheel check passed: $(basename "$WHEEL") installed in $ENV packs every built-in layout and trains --config tiny"
