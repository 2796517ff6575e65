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


# Start-up allocates many objects and frees few: collections during it would only cost time.
gc.disable()
try:
    ipython_version = import_ipython_core()
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
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


def without_jedi(start):
    """Runs `start` while `jedi` looks absent, then lets it be imported again.

    The shell's completer imports jedi (and parso) when it is made, if jedi is installed (a user's own
    Python; the images leave jedi out): about a quarter of the kernel's start-up, for tab completion,
    which no cell uses. While the shell starts,
    `jedi` is a failed import (None in `sys.modules`), so the completer records it as missing and keeps
    its own matchers; afterwards the entry is removed, and `import jedi` in a cell imports it as usual.
    """
    hidden = "jedi" not in sys.modules
    if hidden:
        sys.modules["jedi"] = None
    try:
        return start()
    finally:
        if hidden and sys.modules.get("jedi", False) is None:
            del sys.modules["jedi"]


shell = without_jedi(lambda: InteractiveShell.instance(
    config=settings, display_pub_class=Publisher, displayhook_class=Hook, colors="NoColor"))


def enable_gui(gui=None):
    # `%matplotlib` and `%matplotlib inline` end here: figures come back as image items, and there is no
    # GUI event loop to integrate (the base class only raises NotImplementedError). Set on the instance,
    # not in a subclass: libraries tell front ends apart by the shell's class name.
    if gui not in (None, "inline"):
        from IPython.core.error import UsageError

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


# What start-up allocated lives as long as the kernel: kept out of every later collection.
gc.freeze()
gc.enable()
send({"ready": True, "python": sys.version.split()[0], "ipython": ipython_version})
for line in proto_in:
    request = json.loads(line)
    answer = run(request["code"], request["id"], request.get("stream", False))
    answer["id"] = request["id"]
    send(answer)
