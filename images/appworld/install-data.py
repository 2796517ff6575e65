"""AppWorld's task data into $APPWORLD_ROOT/data, at image build time, from what the build argument
APPWORLD_DATA names: a path relative to the repository root, under images/ (the only part of the build
context that may hold it; images/appworld/data/ is git-ignored for it). Accepted:

- a directory: AppWorld's `data` directory itself (with tasks/ and datasets/), or one holding it;
- AppWorld's own encrypted bundle, `data-0.1.0.bundle` (what `appworld download data` fetches from
  https://s3.us-west-2.amazonaws.com/appworld.dev/data-0.1.0.bundle);
- a .zip or a tar archive (.tar, .tar.gz, .tgz, .tar.xz, .tar.bz2) of either directory.

Without APPWORLD_DATA nothing is installed: the image builds, and boxd answers every AppWorld call with a
"task data not installed" error. Nothing is downloaded, here or when a container starts.

usage: install-data.py CONTEXT [APPWORLD_DATA]   (run by the training venv's python)
"""
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path


def fail(message):
    print(f"install-data: APPWORLD_DATA: {message}", file=sys.stderr)
    sys.exit(1)


def data_directory_in(root, depth=3):
    """The directory under root (root included) that has AppWorld's tasks/ and datasets/."""
    if (root / "tasks").is_dir() and (root / "datasets").is_dir():
        return root
    if depth == 0:
        return None
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.is_symlink():
            found = data_directory_in(child, depth - 1)
            if found is not None:
                return found
    return None


def unpack(source, staging):
    name = source.name.lower()
    if name.endswith(".bundle"):
        from appworld.common.constants import PASSWORD, SALT
        from appworld.common.utils import unpack_bundle

        unpack_bundle(bundle_file_path=str(source), base_directory=str(staging), password=PASSWORD, salt=SALT)
    elif zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            archive.extractall(staging)  # member names are made safe (no absolute paths, no ..)
    elif tarfile.is_tarfile(source):
        with tarfile.open(source) as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(staging, filter="data")
            else:
                for member in archive.getmembers():
                    if member.name.startswith("/") or ".." in Path(member.name).parts:
                        fail(f"{source.name}: unsafe member {member.name!r}")
                archive.extractall(staging)
    else:
        fail(f"{source.name}: not a directory, an AppWorld .bundle, a .zip or a tar archive")


def main():
    context = Path(sys.argv[1]).resolve()
    named = sys.argv[2].strip() if len(sys.argv) > 2 else ""
    root = Path(os.environ["APPWORLD_ROOT"])
    target = root / "data"
    if not named:
        print("install-data: no APPWORLD_DATA: the image has no AppWorld task data (boxd will say so on every "
              "call); build with --build-arg APPWORLD_DATA=images/appworld/data/data-0.1.0.bundle (or a directory "
              "or archive) to include it")
        return
    source = (context / named).resolve()
    if context not in source.parents:
        fail(f"{named!r} must be a path under images/ in the build context (e.g. images/appworld/data/...)")
    if not source.exists():
        fail(f"{named!r} does not exist in the build context (only images/ is sent; put the data under "
             "images/appworld/data/)")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".data-", dir=root))
    try:
        if source.is_dir():
            found = data_directory_in(source)
            if found is None:
                fail(f"{named!r}: no directory with tasks/ and datasets/ in it (AppWorld's data directory)")
            shutil.copytree(found, staging / "data", symlinks=True)
        else:
            unpack(source, staging)
        found = data_directory_in(staging)
        if found is None:
            fail(f"{named!r}: no directory with tasks/ and datasets/ in it (AppWorld's data directory)")
        if target.exists():
            shutil.rmtree(target)
        found.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    splits = sorted(path.stem for path in (target / "datasets").glob("*.txt"))
    tasks = sum(1 for _ in (target / "tasks").iterdir())
    print(f"install-data: AppWorld data installed at {target}: {tasks} tasks, splits {', '.join(splits)}")


if __name__ == "__main__":
    main()
