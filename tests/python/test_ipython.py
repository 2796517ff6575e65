"""run_ipython_cell through the real agentscope-runtime client."""
import base64
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import Boxd


def text_of(result, description):
    for item in result["content"]:
        if item.get("description") == description:
            return item["text"]
    return None


def test_state_output_and_errors(client, boxd):
    assert client.run_ipython_cell("x = 20")["isError"] is False
    result = client.run_ipython_cell("print(x * 2)")
    assert text_of(result, "stdout") == "40\n"
    assert text_of(result, "stderr") is None
    failing = client.call_tool("run_ipython_cell", {"code": "raise ValueError('bad')"})
    assert failing["isError"] is True
    assert "ValueError: bad" in text_of(failing, "stderr")
    assert "\x1b[" not in text_of(failing, "stderr")
    assert str(boxd.workspace) in text_of(client.run_ipython_cell("%pwd"), "stdout")
    assert "hi-from-shell" in text_of(client.run_ipython_cell("!echo hi-from-shell"), "stdout")


def test_figure_is_an_image_item(client):
    result = client.run_ipython_cell(
        "import matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])\nplt.show()"
    )
    images = [item for item in result["content"] if item["type"] == "image"]
    assert len(images) == 1 and images[0]["mimeType"] == "image/png"
    assert base64.b64decode(images[0]["data"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_concurrent_cells_do_not_mix(client):
    def run(index):
        return index, client.run_ipython_cell(f"print('cell-{index}')")

    with ThreadPoolExecutor(8) as pool:
        for index, result in pool.map(run, range(8)):
            assert text_of(result, "stdout") == f"cell-{index}\n"


def kernels_of(boxd):
    """The pids of boxd's kernels (its children running the helper), read from /proc: no request."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            command = open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == boxd.proc.pid and b"IPython helper" in command:
            found.append(int(entry))
    return found


def wait_for(check, seconds=20.0):
    """Whether `check()` holds within `seconds`, asked every 20 ms."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return check()
        time.sleep(0.02)
    return True


def test_no_kernel_until_the_sdk_comes_then_its_first_cell_answers(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    boxd = Boxd(workspace)
    try:
        for _ in range(30):  # 300 ms without a request: never a kernel
            assert kernels_of(boxd) == []
            time.sleep(0.01)
        # `with` probes /healthz (the SDK's first request): that starts the kernel, and the cell waits for it.
        with boxd.client() as client:
            result = client.run_ipython_cell("print(6 * 7)")
        assert text_of(result, "stdout") == "42\n", result
        # The kernel, and the spare kernel boxd warms once a cell has been answered (--kernel-spare).
        assert 1 <= len(kernels_of(boxd)) <= 2
    finally:
        boxd.stop()


def test_the_eager_option_starts_the_kernel_without_a_request(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    boxd = Boxd(workspace, env={"BOXD_KERNEL_START": "eager"})
    try:
        assert wait_for(lambda: len(kernels_of(boxd)) == 1), "no kernel with BOXD_KERNEL_START=eager"
    finally:
        boxd.stop()


def test_a_kernel_over_its_rss_cap_is_recycled_between_cells(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    boxd = Boxd(workspace, "--kernel-max-rss", "200")
    try:
        with boxd.client() as client:
            assert client.run_ipython_cell("kept = 1")["isError"] is False
            grown = client.run_ipython_cell("x = bytearray(300 * 2**20); print(len(x))")
            assert text_of(grown, "stdout") == "314572800\n", grown
            after = text_of(client.run_ipython_cell("print('kept' in globals())"), "stdout")
            notice, rest = after.split("\n", 1)
            assert re.fullmatch(
                r"\[boxd: this is a fresh IPython kernel; the previous one was restarted between cells because "
                r"its memory \(RSS \d+ MiB\) went over the cap of 200 MiB \(--kernel-max-rss\), "
                r"and all earlier state is gone\]", notice), after
            assert rest == "False\n", after
            assert text_of(client.run_ipython_cell("print(1)"), "stdout") == "1\n"
    finally:
        boxd.stop()
