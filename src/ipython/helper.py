"""boxd's IPython helper: one InteractiveShell driven by JSON lines.

Requests arrive on the original stdin and answers leave on the original stdout; those two fds are moved
aside at start so user code can neither read the protocol nor corrupt it. During a cell, fds 1 and 2 point
at capture pipes (so `!cmd`, C extensions and subprocesses are captured too), of which a bounded head and tail
are kept in memory and nothing is written to disk; between cells they point at boxd's log.
"""
import base64
import codecs
import collections
import fcntl
import gc
import json
import os
import re
import selectors
import signal
import sys
import threading
import time
import types

proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
log_fd = os.dup(2)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 0)
os.dup2(log_fd, 1)


send_lock = threading.Lock()


def send(message):
    line = json.dumps(message) + "\n"
    with send_lock:
        proto_out.write(line)
        proto_out.flush()




def import_ipython_core():
    """Imports IPython's shell without running the package's `__init__` at start.

    `import IPython` imports the terminal front end (prompt_toolkit, the application machinery): about
    half of the kernel's start-up, none of it needed to run cells. The package module is created from
    its spec but left unexecuted; its `__init__` runs the first time anything asks the package for a
    name it does not have yet (`IPython.display`, `from IPython import embed`, `IPython.__version__`),
    so user code sees the whole package.
    """
    import importlib.util

    spec = importlib.util.find_spec("IPython")
    if spec is None or spec.loader is None:
        raise ImportError("no module named IPython")
    package = importlib.util.module_from_spec(spec)
    state = {"loaded": False}

    def load_whole_package(name):
        if state["loaded"]:
            raise AttributeError(f"module 'IPython' has no attribute {name!r}")
        state["loaded"] = True
        del package.__getattr__
        spec.loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = load_whole_package
    sys.modules["IPython"] = package
    try:
        from IPython.core.getipython import get_ipython
        # The core's own modules import this one name from the package while they load.
        package.get_ipython = get_ipython
        from IPython.core import release
        return release.version
    except BaseException:
        sys.modules.pop("IPython", None)
        raise


class LazyModule(types.ModuleType):
    """A module in `sys.modules` whose code runs on the first access to anything but its spec.

    importlib's LazyLoader does the same, but in Python 3.11 a second `import` of the module reads its
    `__spec__` (is it still initialising?), which runs it: here that read does not.
    """

    def __getattribute__(self, attribute):
        if attribute == "__spec__":
            return super().__getattribute__(attribute)
        spec = super().__getattribute__("__spec__")
        self.__class__ = types.ModuleType
        spec.loader.exec_module(self)
        return getattr(self, attribute)


def import_lazily(names):
    """Puts each module in `sys.modules` unexecuted, as a LazyModule.

    IPython's core imports these at start and uses them only when a cell needs them: asyncio for a cell
    with top-level `await`, stack_data to format a traceback; about 25 ms of the kernel's start together.
    `finish_start` runs them after the first cell, so the lazy state lasts at most one cell (a lazy module
    first touched by two threads at once may show one of them its partial state).
    """
    import importlib.util

    deferred = []
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            continue
        module = importlib.util.module_from_spec(spec)
        module.__class__ = LazyModule
        sys.modules[name] = module
        deferred.append(module)
    return deferred


# Start-up allocates many objects and frees few: collections during it would only cost time.
gc.disable()
try:
    lazy_modules = import_lazily(("asyncio", "stack_data"))
    ipython_version = import_ipython_core()
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.magic import MagicsManager
    from traitlets import Any
    from traitlets.config import Config
except ImportError as error:
    send({"fatal": f"IPython is not installed for {sys.executable}: {error}"})
    sys.exit(3)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")

# Bounds on what one cell can make the kernel hold. Output never touches the disk: fds 1 and 2 of a cell are
# pipes, read by one thread that keeps only a bounded head and tail in memory.
#: Bytes of each stream (stdout, stderr) a cell's answer keeps: the first half and the last half; what lies
#: between is dropped and counted in a marker. boxd passes its --max-output.
MAX_OUTPUT = max(2, int(os.environ.get("BOXD_MAX_OUTPUT", str(4 * 1024 * 1024))))
#: Bytes of each stream a streaming cell forwards as it runs; past it, one marker event, and the answer
#: still carries the head and the tail.
MAX_STREAMED = MAX_OUTPUT
#: Seconds live output may wait to be sent with what follows it (one event per write would be chatty).
STREAM_BATCH = 0.05
#: Bytes of images (as base64) one cell's answer carries; later images are dropped and counted in stdout.
MAX_IMAGE_BYTES = 16 * 1024 * 1024
#: Kernel buffer of a capture pipe: a writer blocks (never fails) when the reader is behind by this much.
PIPE_SIZE = 1024 * 1024
#: Bytes read from a capture pipe at a time.
READ_SIZE = 65536
#: Pipes of finished cells still held open by processes those cells started in the background; what they
#: write is read and dropped. Past this many, the oldest is closed, and its writers get SIGPIPE (or EPIPE).
MAX_ORPHAN_PIPES = 64
#: Bytes still read from a pipe when its cell ends, while a background writer keeps filling it.
FINISH_DRAIN = 2 * PIPE_SIZE
F_SETPIPE_SZ = 1031

images = []
dropped_images = [0, 0]


def take_images(data):
    found = False
    for mime in IMAGE_TYPES:
        payload = data.get(mime)
        if payload is None:
            continue
        found = True
        if isinstance(payload, bytes):
            payload = base64.b64encode(payload).decode()
        elif mime == "image/svg+xml":
            payload = base64.b64encode(payload.encode()).decode()
        if sum(len(image["data"]) for image in images) + len(payload) > MAX_IMAGE_BYTES:
            dropped_images[0] += 1
            dropped_images[1] += len(payload)
            continue
        images.append({"mimeType": mime, "data": payload})
    return found


class Publisher(DisplayPublisher):
    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        if not take_images(data) and "text/plain" in data:
            print(data["text/plain"])


class Hook(DisplayHook):
    def write_format_data(self, format_dict, md_dict=None):
        take_images(format_dict)
        super().write_format_data(format_dict, md_dict)


os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
# History stays in memory (`In`, `_i`, `%history` of this session), not in a SQLite file outside the
# workspace: writing it took a lock shared with IPython's saving thread and a commit per cell, a third of a
# millisecond at the median and more at the tail.
settings = Config()
settings.HistoryManager.enabled = False
# `get_ipython().complete()` gives IPython's own matches whether or not a cell imported jedi before the
# completer was made (with jedi, that older API leaves Python names to jedi's `completions()`).
settings.IPCompleter.use_jedi = False


def without_jedi(start):
    """Runs `start` while `jedi` looks absent, then puts back what was there.

    The completer imports jedi (and parso) when it is made, if jedi is installed (a user's own Python; the
    images leave jedi out): ~80 ms, for tab completion, which no cell uses. While it is made, `jedi` is a
    failed import (None in `sys.modules`), so it keeps its own matchers, whether it is made after the
    first cell or on demand in a cell that imported jedi itself; `import jedi` in a cell works as usual.
    """
    missing = object()
    previous = sys.modules.get("jedi", missing)
    sys.modules["jedi"] = None
    try:
        return start()
    finally:
        if sys.modules.get("jedi", missing) is None:
            if previous is missing:
                del sys.modules["jedi"]
            else:
                sys.modules["jedi"] = previous


# IPython's built-in magics, by kind, as `InteractiveShell.init_magics` registers them in the IPython
# release named here (the one every image and `make run` install): with it, the magics are registered
# after the first cell, and their names stand in the table until then. Loading them is IPython.core.magics
# (%load's urllib/http/email, the profiler, ...) and an argparse parser formatted for each %%script magic:
# ~65 ms, a fifth of the kernel's start. With another IPython they load at start, as IPython does it.
BUILTIN_MAGICS_RELEASE = "8.31.0"
BUILTIN_MAGICS = {
    "line": """automagic autocall alias_magic lsmagic magic page pprint colors xmode quickref doctest_mode gui
        precision notebook save pastebin loadpy load edit config prun pdb debug tb run timeit time macro code_wrap
        load_ext unload_ext reload_ext history recall rerun logstart logstop logoff logon logstate pinfo pinfo2
        pdef pdoc psource pfile psearch who_ls who whos reset reset_selective xdel alias unalias rehashx pwd cd
        env set_env pushd popd dirs dhist sc sx system bookmark pycat pip conda mamba micromamba uv matplotlib
        pylab killbgscripts autoawait ed hist rep""".split(),
    "cell": """js javascript latex svg html markdown prun debug timeit time capture code_wrap sx system ! writefile
        script sh bash perl ruby python python2 python3 pypy SVG HTML file""".split(),
}


class DeferredMagic:
    """A built-in magic's place in the table until the magics are registered: any use registers them all
    and is forwarded to the real one, so `%time`, `%%bash` and automagic `pwd` work in the first cell."""

    __slots__ = ("kind", "name")

    def __init__(self, kind, name):
        self.kind = kind
        self.name = name

    def resolve(self):
        register_builtin_magics()
        found = shell.magics_manager.magics[self.kind].get(self.name)
        if found is None or isinstance(found, DeferredMagic):
            raise UsageError(f"{self.kind} magic {self.name} is not in IPython {ipython_version}")
        return found

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, attribute):
        return getattr(self.resolve(), attribute)


class StartingMagicsManager(MagicsManager):
    """The shell's magics table before the built-ins are registered: their names, each a DeferredMagic,
    and whatever start-up adds (the aliases of `ls`, `cat`...). `user_magics` is a plain namespace:
    IPython's UserMagics lives in the package being deferred."""

    user_magics = Any()


def start_magics_deferred(self):
    manager = StartingMagicsManager(shell=self, parent=self, user_magics=types.SimpleNamespace())
    manager.registry.clear()
    for kind, names in BUILTIN_MAGICS.items():
        for name in names:
            manager.magics[kind][name] = DeferredMagic(kind, name)
    self.magics_manager = manager
    self.configurables.append(manager)
    self.register_magics = manager.register


def register_builtin_magics():
    """Registers IPython's built-in magics the way IPython does, then puts back on top what was added to
    the starting table (aliases, magics a cell registered), as IPython's own order would have."""
    starting = shell.magics_manager
    if not isinstance(starting, StartingMagicsManager):
        return
    ipython_init_magics(shell)
    manager = shell.magics_manager
    for kind, table in starting.magics.items():
        manager.magics[kind].update(
            (name, magic) for name, magic in table.items() if not isinstance(magic, DeferredMagic))
    for name, magic in vars(starting.user_magics).items():
        setattr(manager.user_magics, name, magic)
    manager.registry.update(starting.registry)
    manager.lazy_magics.update(starting.lazy_magics)
    shell.configurables.remove(starting)
    # The alias manager keeps the line table it was made with.
    shell.alias_manager.linemagics = manager.magics["line"]


class DeferredCompleter:
    """`shell.Completer` until the completer is made (after the first cell): reading it makes it now."""

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        if "Completer" not in instance.__dict__:
            make_completer()
        return instance.__dict__["Completer"]

    def __set__(self, instance, value):
        instance.__dict__["Completer"] = value


def make_completer():
    """IPython's completer (IPython.core.completer, ~10 ms; jedi too where it is installed), made after
    the first cell: no cell needs it, `get_ipython().complete()` makes it on demand."""
    if isinstance(InteractiveShell.__dict__.get("Completer"), DeferredCompleter):
        without_jedi(lambda: ipython_init_completer(shell))
        del InteractiveShell.Completer


def load_lazy_modules():
    for module in lazy_modules:
        getattr(module, "__name__")
    lazy_modules.clear()


ipython_init_magics = InteractiveShell.init_magics
ipython_init_completer = InteractiveShell.init_completer
defer_magics = ipython_version == BUILTIN_MAGICS_RELEASE
if defer_magics:
    InteractiveShell.init_magics = start_magics_deferred
InteractiveShell.init_completer = lambda self: None  # made by make_completer
InteractiveShell.Completer = DeferredCompleter()
try:
    shell = InteractiveShell.instance(
        config=settings, display_pub_class=Publisher, displayhook_class=Hook, colors="NoColor")
finally:
    InteractiveShell.init_magics = ipython_init_magics
    InteractiveShell.init_completer = ipython_init_completer


def enable_gui(gui=None):
    # `%matplotlib` and `%matplotlib inline` end here: figures come back as image items, and there is no
    # GUI event loop to integrate (the base class only raises NotImplementedError). Set on the instance,
    # not in a subclass: libraries tell front ends apart by the shell's class name.
    if gui not in (None, "inline"):
        raise UsageError(f"no {gui} event loop in this kernel: figures come back inline, as images")


shell.enable_gui = enable_gui


def show_traceback_on_stderr(etype, evalue, stb):
    sys.stderr.write(ANSI.sub("", shell.InteractiveTB.stb2text(stb)) + "\n")


shell._showtraceback = show_traceback_on_stderr
# Only a running cell is interruptible; a late SIGINT between cells must not break the protocol loop.
signal.signal(signal.SIGINT, signal.SIG_IGN)


class Capture:
    """One stream of one cell: a pipe, of which only a bounded head and tail are kept."""

    def __init__(self, name, request_id, stream):
        self.name = name
        self.request_id = request_id
        self.stream = stream
        self.read_fd, self.write_fd = os.pipe()
        try:
            fcntl.fcntl(self.read_fd, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the default 64 KiB works too, with more wake-ups
        os.set_blocking(self.read_fd, False)
        self.head_cap = MAX_OUTPUT - MAX_OUTPUT // 2
        self.tail_cap = MAX_OUTPUT // 2
        self.head = bytearray()
        self.tail = collections.deque()
        self.tail_len = 0
        self.total = 0
        self.streamed = 0
        self.pending = ""
        self.pending_since = 0.0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.open = True

    def take(self, chunk):
        self.total += len(chunk)
        if self.stream:
            self.forward(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
                self.tail_len -= len(self.tail.popleft())

    def forward(self, chunk, final=False):
        if self.streamed > MAX_STREAMED:
            return
        room = MAX_STREAMED - self.streamed
        self.streamed += len(chunk)
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending += self.decoder.decode(chunk[:room], final=final)
        if self.streamed > MAX_STREAMED:
            self.pending += (f"\n[boxd: live output stopped after {MAX_STREAMED} bytes of {self.name}; "
                             "the result keeps the head and the tail]\n")
        if len(self.pending) >= READ_SIZE or final:
            self.flush()

    def flush(self):
        text = ANSI.sub("", self.pending) if self.name == "stderr" else self.pending
        self.pending = ""
        if text:
            send({"id": self.request_id, "output": {"stream": self.name, "data": text}})

    def text(self):
        if self.stream:
            self.forward(b"", final=True)
        tail = b"".join(self.tail)[-self.tail_cap:] if self.tail_cap else b""
        omitted = self.total - len(self.head) - len(tail)
        if omitted <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace")
        marker = f"\n[boxd: output truncated, {omitted} bytes omitted]\n".encode()
        return (bytes(self.head) + marker + tail).decode("utf-8", "replace")


class Collector(threading.Thread):
    """Reads every capture pipe, so no writer, user code or subprocess, ever fills a disk or waits for long.

    Owns the pipes' read ends; other threads talk to it through `requests` and a wake-up pipe.
    """

    def __init__(self):
        super().__init__(daemon=True, name="boxd-capture")
        self.selector = selectors.DefaultSelector()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        self.selector.register(self.wake_read, selectors.EVENT_READ, None)
        self.requests = collections.deque()
        self.orphans = collections.OrderedDict()

    def add(self, *captures):
        """Registers a cell's pipes before the cell starts: this thread then sleeps in `select` while the
        cell runs instead of competing with it for the interpreter (which cost the cell up to a switch
        interval, 5 ms, at the tail)."""
        self.ask("add", captures)

    def finish(self, *captures):
        """Waits until the captures hold everything their cell wrote (the caller has closed its write ends)."""
        self.ask("finish", captures)

    def ask(self, verb, captures):
        served = threading.Event()
        self.requests.append((verb, captures, served))
        os.write(self.wake_write, b"x")
        served.wait()

    def run(self):
        while True:
            try:
                batching = [key.data for key in self.selector.get_map().values()
                            if key.data is not None and key.data.pending]
                now = time.monotonic()
                wait = min((capture.pending_since + STREAM_BATCH - now for capture in batching), default=None)
                for key, _ in self.selector.select(None if wait is None else max(0.0, wait)):
                    if key.fd == self.wake_read:
                        self.serve_requests()
                    elif self.selector.get_map().get(key.fd) is key:
                        # Not closed by an earlier event of this batch: once closed, its number may already
                        # belong to the next cell's pipe, which must not be read or closed here.
                        self.read(key.fd, key.data)
                now = time.monotonic()
                for capture in batching:
                    if capture.pending and now - capture.pending_since >= STREAM_BATCH:
                        capture.flush()
            except Exception as error:  # a dead collector would hang every later cell
                print(f"boxd: output capture: {error!r}", file=sys.stderr)

    def serve_requests(self):
        try:
            os.read(self.wake_read, 4096)
        except BlockingIOError:
            pass
        while self.requests:
            verb, captures, served = self.requests.popleft()
            try:
                for capture in captures:
                    if verb == "add":
                        self.selector.register(capture.read_fd, selectors.EVENT_READ, capture)
                    else:
                        self.settle(capture)
            finally:
                served.set()

    def read(self, fd, capture):
        try:
            chunk = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close(fd, capture)
        elif capture is not None:
            capture.take(chunk)

    def settle(self, capture):
        fd = capture.read_fd
        if not capture.open:
            return
        drained = 0
        while drained < FINISH_DRAIN:
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.close(fd, capture)
                break
            drained += len(chunk)
            capture.take(chunk)
        if capture.open:
            # A process the cell started still holds the write end: keep reading, and dropping, what it writes.
            self.selector.modify(fd, selectors.EVENT_READ, None)
            self.orphans[fd] = None
            if len(self.orphans) > MAX_ORPHAN_PIPES:
                oldest = next(iter(self.orphans))
                print(f"boxd: closing the output of an old cell's background process (fd {oldest})", file=sys.stderr)
                self.close(oldest)

    def close(self, fd, capture=None):
        if capture is not None:
            capture.open = False
        self.orphans.pop(fd, None)
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass
        os.close(fd)


collector = Collector()
collector.start()


def run(code, request_id, stream):
    images.clear()
    dropped_images[:] = [0, 0]
    out = Capture("stdout", request_id, stream)
    err = Capture("stderr", request_id, stream)
    collector.add(out, err)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out.write_fd, 1)
    os.dup2(err.write_fd, 2)
    os.close(out.write_fd)
    os.close(err.write_fd)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        shell.run_cell(code, store_history=True)
    except KeyboardInterrupt:
        sys.stderr.write("KeyboardInterrupt\n")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
    collector.finish(out, err)
    stdout = out.text()
    if dropped_images[0]:
        stdout += (f"\n[boxd: {dropped_images[0]} images dropped ({dropped_images[1]} bytes): "
                   f"a cell's images are capped at {MAX_IMAGE_BYTES} bytes]\n")
    return {"stdout": stdout, "stderr": ANSI.sub("", err.text()), "images": list(images)}


# What the kernel leaves out of its start, in the order it is done afterwards.
unfinished_start = [load_lazy_modules, register_builtin_magics, make_completer]


def finish_start():
    """Does what start-up left out: when boxd says no cell waits (a kernel warmed ahead of its first
    cell), or else right after the first cell's answer, so the partial state lasts at most one cell."""
    while unfinished_start:
        collecting = gc.isenabled()  # as a cell left it
        gc.disable()
        try:
            unfinished_start.pop(0)()
        except Exception as error:  # each part is also done on demand, where its error reaches the cell
            print(f"boxd: finishing the kernel's start: {error!r}", file=sys.stderr)
        finally:
            if collecting:
                gc.enable()


# What start-up allocated lives as long as the kernel: kept out of every later collection.
gc.freeze()
gc.enable()
send({"ready": True, "python": sys.version.split()[0], "ipython": ipython_version})
for line in proto_in:
    request = json.loads(line)
    if request.get("finish_start"):
        finish_start()
        continue
    answer = run(request["code"], request["id"], request.get("stream", False))
    answer["id"] = request["id"]
    send(answer)
    finish_start()
