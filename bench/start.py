"""How long a server takes from its exec to its first `200` for `GET /healthz`, measured the same way for
boxd, upstream and the floor: a program that only binds, listens and answers (`bench/start_floor.c`),
which is what exec and bind cost on this machine.

The process is started with `posix_spawn` and polled with a raw request every 0.1 ms: Python's
`subprocess.Popen` (its fork, descriptor closing and pipes) and `http.client` added ~3 ms to a 4 ms figure
when they were the measurement. Every loop is bounded in count and time; only loopback is used.
"""
import os
import pathlib
import select
import shutil
import signal
import socket
import statistics
import subprocess
import time

from family_bench import free_port

FLOOR_SOURCE = pathlib.Path(__file__).resolve().parent / "start_floor.c"
# Each poll: connect, send the request, read the status line. Refused until the server listens.
POLL_EVERY = 0.0001
# Past this, a start that has not answered is polled every 2 ms (upstream takes ~1 s: polling it every
# 0.1 ms would take a core from it).
FAST_POLLING_FOR = 0.05
START_DEADLINE = 60


def build_floor(out_dir):
    """The floor program, compiled with the C compiler the Rust build links with (a static PIE, as the
    image's boxd is); None where there is no compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = pathlib.Path(out_dir) / "start-floor"
    for flags in (["-static-pie"], []):
        built = subprocess.run([compiler, "-O2", *flags, "-o", str(binary), str(FLOOR_SOURCE)],
                               capture_output=True)
        if built.returncode == 0:
            return str(binary)
    return None


def answers_healthz(port, token):
    """Whether one raw `GET /healthz` on `port` is answered `200` now (False while nothing listens)."""
    request = (f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
               "Connection: close\r\n\r\n").encode()
    with socket.socket() as sock:
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(request)
            return sock.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False


def wait_for_healthz(port, token, started, within):
    """Seconds from `started` (a `time.perf_counter()` reading) to the first `200` for `/healthz` on
    `port`, or None if none came within `within` seconds of it."""
    while time.perf_counter() - started < within:
        if answers_healthz(port, token):
            return time.perf_counter() - started
        time.sleep(POLL_EVERY if time.perf_counter() - started < FAST_POLLING_FOR else 0.002)
    return None


def one_start(argv, env, port, token, cwd=None):
    """Seconds from `posix_spawn` of `argv` to the first `200` for `/healthz` on `port`; the process is
    stopped (SIGTERM, then SIGKILL after 10 s) before returning."""
    devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    # A relative program path names a file from here, not from `cwd`.
    argv = [os.path.abspath(argv[0]), *argv[1:]]
    previous = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        started = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=devnull)
    finally:
        os.chdir(previous)
    try:
        answered = wait_for_healthz(port, token, started, START_DEADLINE)
    finally:
        stop(pid)
    if answered is None:
        raise RuntimeError(f"{argv[0]} did not answer /healthz within {START_DEADLINE} s")
    return answered


def stop(pid):
    """SIGTERM, then SIGKILL if `pid` has not exited within 10 s; returns once it is reaped (its exit is
    watched through a pidfd, not polled)."""
    pidfd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGTERM)
        exited, _, _ = select.select([pidfd], [], [], 10)
        if not exited:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    os.waitpid(pid, 0)


def median_start_ms(make_command, token, samples, cwd=None):
    """The median of `samples` starts, in ms; `make_command(port)` gives the (argv, environment) that
    start the server on a fresh port."""
    starts = []
    for _ in range(samples):
        port = free_port()
        argv, env = make_command(port)
        starts.append(one_start(argv, env, port, token, cwd))
    return statistics.median(starts) * 1000


def floor_start_ms(out_dir, samples):
    """The floor's median start in ms, or None where it cannot be built."""
    binary = build_floor(out_dir)
    if binary is None:
        return None
    return median_start_ms(lambda port: ([binary, str(port)], {}), "", samples)
