"""boxd's IPython helper (src/ipython/helper.py) driven directly over its JSON-lines protocol, as boxd drives it:
races between a cell and the thread that reads its output show only over many quick cells."""
import json
import os
import pathlib
import subprocess
import sys

HELPER = pathlib.Path(__file__).resolve().parents[2] / "src" / "ipython" / "helper.py"


def test_many_quick_cells_keep_their_output_and_the_capture_thread_never_fails(tmp_path):
    log = tmp_path / "helper.log"
    with open(log, "w") as sink:
        helper = subprocess.Popen([sys.executable, "-c", HELPER.read_text()], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=sink, text=True, bufsize=1,
                                  env={**os.environ, "HOME": str(tmp_path)})
        try:
            assert json.loads(helper.stdout.readline())["ready"] is True
            for index in range(400):
                # A cell's pipes are closed once it is done and their numbers are reused by the next
                # cell's: the capture thread must never read or close a number that is no longer its own.
                # Output large enough to be read while the cell's end is being served.
                helper.stdin.write(json.dumps({"id": index, "code": f"print({index}); print('a' * 102400)"}) + "\n")
                helper.stdin.flush()
                answer = json.loads(helper.stdout.readline())
                assert answer["id"] == index
                assert answer["stdout"] == f"{index}\n" + "a" * 102400 + "\n", answer["stdout"][:200]
        finally:
            helper.kill()
            helper.wait(10)
    assert "output capture" not in log.read_text(), log.read_text()[-2000:]


def test_history_stays_in_memory_and_is_not_written_to_a_file(tmp_path):
    helper = subprocess.Popen([sys.executable, "-c", HELPER.read_text()], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                              env={**os.environ, "HOME": str(tmp_path), "IPYTHONDIR": str(tmp_path / "ipython")})
    try:
        helper.stdout.readline()
        answers = []
        for index, code in enumerate(["x = 5", "x", "print(In[1], _)", "%history -n"]):
            helper.stdin.write(json.dumps({"id": index, "code": code}) + "\n")
            helper.stdin.flush()
            answers.append(json.loads(helper.stdout.readline())["stdout"])
    finally:
        helper.kill()
        helper.wait(10)
    assert answers[1] == "Out[2]: 5\n"
    assert answers[2] == "x = 5 5\n"
    assert "1: x = 5" in answers[3] and "3: print(In[1], _)" in answers[3]
    assert not list(tmp_path.rglob("history.sqlite"))
