"""run_ipython_cell through the real agentscope-runtime client."""
import base64
from concurrent.futures import ThreadPoolExecutor


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
