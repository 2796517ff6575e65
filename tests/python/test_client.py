"""Every route of the core contract through the real agentscope-runtime client."""
import hashlib
import os
import signal
import time

import pytest
import requests

from conftest import Boxd


def text_of(result, description):
    for item in result["content"]:
        if item.get("description") == description:
            return item["text"]
    return None


def test_health_and_prefix(client):
    assert client.base_url.endswith("/fastapi")
    assert client.check_health()


def test_shell_command(client, boxd):
    result = client.run_shell_command("echo hello; echo oops >&2")
    assert text_of(result, "stdout") == "hello\n"
    assert text_of(result, "stderr") == "oops\n"
    assert text_of(result, "returncode") == "0"
    assert result["isError"] is True
    via_tool = client.call_tool("run_shell_command", {"command": "pwd"})
    assert text_of(via_tool, "stdout").strip() == str(boxd.workspace)
    assert via_tool["isError"] is False


def test_background_process_does_not_hold_the_answer(client, boxd):
    started = time.monotonic()
    result = client.run_shell_command("sleep 40 & echo $! > bg.pid; echo launched")
    assert time.monotonic() - started < 3
    assert text_of(result, "stdout") == "launched\n"
    # Its own sleep, by pid: `pkill -f 'sleep 40$'` would reach any other `sleep 40` of the machine.
    os.kill(int((boxd.workspace / "bg.pid").read_text()), signal.SIGKILL)


def test_shell_timeout_through_the_client(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = Boxd(workspace, "--command-timeout", "1")
    try:
        with server.client() as client:
            started = time.monotonic()
            result = client.run_shell_command("echo before; sleep 60")
            assert time.monotonic() - started < 6
            assert text_of(result, "stdout") == "before\n"
            assert text_of(result, "returncode") == "124"
            assert "timed out" in text_of(result, "stderr")
    finally:
        server.stop()


def test_workspace_file_round_trips(client, boxd):
    info = client.workspace_write("notes/a.txt", "héllo")
    assert info["type"] == "file" and info["size"] == len("héllo".encode())
    assert info["path"] == str(boxd.workspace / "notes" / "a.txt")
    assert client.workspace_read("notes/a.txt") == "héllo"
    client.workspace_write("bin/b.bin", b"\x00\x01\xff")
    assert client.workspace_read("bin/b.bin", fmt="bytes") == b"\x00\x01\xff"
    assert b"".join(client.workspace_read("bin/b.bin", fmt="stream")) == b"\x00\x01\xff"
    assert (boxd.workspace / "notes" / "a.txt").read_text() == "héllo"

    placed = client.workspace_write_many([
        {"path": "many/one.txt", "data": "1"},
        {"path": "many/deep/two.bin", "data": b"\x02"},
    ])
    assert [entry["name"] for entry in placed] == ["one.txt", "two.bin"]
    assert (boxd.workspace / "many" / "deep" / "two.bin").read_bytes() == b"\x02"

    listed = client.workspace_list("many", depth=3)
    assert sorted(entry["name"] for entry in listed) == ["deep", "one.txt", "two.bin"]
    assert [entry["name"] for entry in client.workspace_list("many")] == ["deep", "one.txt"]
    assert client.workspace_exists("many/one.txt") is True
    assert client.workspace_exists("many/nothing") is False

    assert client.workspace_mkdir("made/here") is True
    assert client.workspace_mkdir("made/here") is False
    moved = client.workspace_move("many/one.txt", "made/here/one.txt")
    assert moved["path"] == str(boxd.workspace / "made" / "here" / "one.txt")
    client.workspace_remove("many")
    assert not (boxd.workspace / "many").exists()
    client.workspace_remove("many")  # missing is fine


def test_large_file_streams_both_ways(client, tmp_path):
    source = tmp_path / "big.bin"
    with open(source, "wb") as out:
        for block in range(64):
            out.write(hashlib.sha256(str(block).encode()).digest() * (1024 * 1024 // 32))
    info = client.workspace_write_from_path("big/big.bin", str(source))
    assert info["size"] == 64 * 1024 * 1024
    digest = hashlib.sha256()
    for chunk in client.workspace_read("big/big.bin", fmt="stream"):
        digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(source.read_bytes()).hexdigest()


def test_escapes_are_refused(client, boxd):
    outside = boxd.workspace.parent / "outside.txt"
    outside.write_text("secret")
    sibling = boxd.workspace.parent / (boxd.workspace.name + "2")
    sibling.mkdir()
    os.symlink(outside, boxd.workspace / "link-out")
    os.symlink(boxd.workspace.parent, boxd.workspace / "dir-out")
    for path in ["../outside.txt", str(outside), str(sibling / "x"), "dir-out/outside.txt"]:
        with pytest.raises(requests.HTTPError) as read_error:
            client.workspace_read(path)
        assert read_error.value.response.status_code == 403
        with pytest.raises(requests.HTTPError) as write_error:
            client.workspace_write(path, "pwned")
        assert write_error.value.response.status_code == 403
        with pytest.raises(requests.HTTPError):
            client.workspace_remove(path)
        assert client.workspace_exists(path) is False
        refused = client.workspace_move(path, "stolen")
        assert refused.get("isError") is True
    # A final link out: what goes through it is refused; the link itself is an entry that exists and
    # can be deleted (upstream's os.remove), its target left alone.
    for call in (client.workspace_read, lambda p: client.workspace_write(p, "pwned")):
        with pytest.raises(requests.HTTPError) as error:
            call("link-out")
        assert error.value.response.status_code == 403
    kinds = {entry["name"]: entry["type"] for entry in client.workspace_list("")}
    assert kinds["link-out"] == "symlink" and kinds["dir-out"] == "symlink"
    assert client.workspace_exists("link-out") is True
    client.workspace_remove("link-out")
    assert not os.path.lexists(boxd.workspace / "link-out")
    assert outside.read_text() == "secret"
    assert not (sibling / "x").exists()


def test_git_watcher(client, boxd):
    (boxd.workspace / "a.txt").write_text("one\n")
    first = client.commit_changes("first")
    assert first["message"] == "first" and len(first["commit"]) == 40
    (boxd.workspace / "a.txt").write_text("two\n")
    (boxd.workspace / "new.txt").write_text("fresh\n")
    pending = client.generate_diff()
    assert "-one\n+two\n" in pending["diffs"]["a.txt"]
    assert "+fresh" in pending["diffs"]["new.txt"]
    second = client.commit_changes()
    assert second["message"] == "Automated commit"
    between = client.generate_diff(first["commit"], second["commit"])
    assert "-one\n+two\n" in between["diffs"]["a.txt"]
    logs = client.git_logs()["logs"]
    assert [entry["message"] for entry in logs] == ["Automated commit", "first"]
    assert logs[0]["commit"] == second["commit"]
    assert "+fresh" in logs[0]["diff"]["new.txt"]
    one_sided = client.generate_diff(first["commit"], None)
    assert one_sided.get("isError") is True and "400" in one_sided["content"][0]["text"]
