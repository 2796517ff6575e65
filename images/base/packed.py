"""Programs an image keeps xz-compressed until their first run.

A few large programs are in the base image for completeness but rarely run in a sandbox: uv (38 MB, for
users' own `uvx` MCP servers and `uv pip`), and git's helpers that are not built into `git` (`git daemon`,
`git http-backend`, `git imap-send`, dumb-HTTP fetch and push, `git shell`, `scalar`: 2 MB each, as each
links all of libgit). Compressed they take 12 MB where they took 55. Each one's path holds a two-line
stub that runs this script; the first run unpacks the program over its stub (in place, atomically, so
every later run execs the program itself) and execs it with the same arguments. The first run costs ~0.5
s for uv, ~50 ms for a git helper; nothing needs the network.

Where the program's directory is not writable (a user other than root, a read-only root filesystem), the
program is unpacked into that user's cache directory instead, and run from there.

    packed.py pack GROUP PATH...    at image build time: compress PATHs into GROUP.tar.xz, leave stubs
    packed.py run PATH [ARG...]     what a stub runs
"""
import hashlib
import io
import json
import lzma
import os
import sys
import tarfile
import tempfile

HOME = "/usr/local/lib/boxd"
# GROUP.tar.xz and GROUP.json (path -> member) per group: groups packed in different build stages merge by
# copying the directory.
ARCHIVES = os.path.join(HOME, "packed")
STUB = (
    "#!/bin/sh\n"
    "# boxd: stored compressed in this image, unpacked by its first run (see /usr/local/lib/boxd/packed.py)\n"
    f'exec /usr/bin/python3 -I {HOME}/packed.py run "$0" "$@"\n'
)


def read_manifests():
    entries = {}
    for name in sorted(os.listdir(ARCHIVES)):
        if name.endswith(".json"):
            with open(os.path.join(ARCHIVES, name)) as manifest:
                entries.update(json.load(manifest))
    return entries


def pack(group, paths):
    """Compresses PATHS (one solid archive: git's helpers share most of their bytes) and stubs them."""
    os.makedirs(ARCHIVES, exist_ok=True)
    manifest = {}
    archive = f"{group}.tar.xz"
    members = {}
    with lzma.open(os.path.join(ARCHIVES, archive), "wb", preset=9 | lzma.PRESET_EXTREME) as compressed:
        with tarfile.open(fileobj=compressed, mode="w|") as tar:
            for path in paths:
                status = os.stat(path)
                # Hard links (Debian's /usr/bin/scalar is /usr/lib/git-core/scalar) are stored once.
                key = (status.st_dev, status.st_ino)
                if key not in members:
                    with open(path, "rb") as program:
                        data = program.read()
                    info = tarfile.TarInfo(path.lstrip("/"))
                    info.size, info.mode = len(data), status.st_mode & 0o7777
                    tar.addfile(info, io.BytesIO(data))
                    members[key] = {"member": info.name, "size": len(data), "mode": info.mode,
                                    "sha256": hashlib.sha256(data).hexdigest()}
                manifest[path] = {"archive": archive, **members[key]}
    for path in paths:
        with open(path + ".stub", "w") as stub:
            stub.write(STUB)
        os.chmod(path + ".stub", 0o755)
        os.replace(path + ".stub", path)
    with open(os.path.join(ARCHIVES, f"{group}.json"), "w") as out:
        json.dump(manifest, out, indent=1, sort_keys=True)


def unpacked_bytes(entry):
    with tarfile.open(os.path.join(ARCHIVES, entry["archive"]), mode="r|xz") as tar:
        for info in tar:
            if info.name == entry["member"]:
                data = tar.extractfile(info).read()
                if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                    raise SystemExit(f"{entry['archive']}: {info.name} does not match its checksum")
                return data
    raise SystemExit(f"{entry['archive']} holds no {entry['member']}")


def write_beside(target, data, mode):
    """Writes DATA to a new file next to TARGET and renames it over TARGET (atomic, so two first runs at
    once each leave a whole program)."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".unpacking-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def own_cache():
    """The invoking user's cache directory for unpacked programs, refused unless it is theirs alone."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = os.path.join(base, "boxd-unpacked")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    status = os.lstat(cache)
    if status.st_uid != os.getuid() or status.st_mode & 0o077 or not os.path.isdir(cache) \
            or os.path.islink(cache):
        raise PermissionError(f"{cache} is not a directory only this user can write")
    return cache


def is_stub(path):
    try:
        with open(path, "rb") as file:
            return file.read(len(STUB) + 1) == STUB.encode()
    except OSError:
        return False


def run(invoked, args):
    path = os.path.realpath(invoked)
    entry = read_manifests().get(path)
    if entry is None:
        raise SystemExit(f"{invoked}: not a program this image stores compressed")
    if is_stub(path):
        data = unpacked_bytes(entry)
        try:
            write_beside(path, data, entry["mode"])
        except OSError:
            cached = os.path.join(own_cache(), entry["sha256"][:16] + "-" + os.path.basename(path))
            if not (os.path.isfile(cached) and os.path.getsize(cached) == entry["size"]):
                write_beside(cached, data, 0o700)
            path = cached
    os.execv(path, [invoked, *args])


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "pack":
        pack(sys.argv[2], sys.argv[3:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
