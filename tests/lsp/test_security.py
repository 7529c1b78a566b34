"""Issue 22, items 1, 3 and 4: nothing runs before the client's settings are known; one client
per socket, and nothing before `initialize`; the cache folder is private and written atomically.

The configuration and transport tests drive the server over raw JSON-RPC (`Raw`), so the
test decides when (and whether) `workspace/configuration` is answered; they use the stand-in
compiler (tests/lsp/lsp_fake_compile.py): a compile that ran shows as a worker pid.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from lsp_helpers import FAKE, MODEL, REPO, server_env, write_model
from lsp_raw import Raw, connect_tcp, server_process, stdio_server
from lsp_server.features import CONFIG_NOTICE_S
from lsp_server.files import UnsafeFolder, write_private


async def _debug(c: Raw) -> dict:
    return (await c.command("fusionlens.debugInfo"))["result"]


def _statuses(c: Raw) -> list[str]:
    return [m["params"]["state"] for m in c.notes if m.get("method") == "fusionlens/status"]


# --- 1. the settings race ---------------------------------------------------------------------

@pytest.mark.asyncio
async def test_a_late_configuration_answer_counts_and_nothing_runs_before(tmp_path):
    """Empty initializationOptions, and the answer to workspace/configuration comes after the
    server's notice (the old 10 s timeout): nothing ran before it, the notice is said once,
    and the late `false` is applied."""
    release = asyncio.Event()

    async def late(params):
        await release.wait()
        return [{"allowExecution": False}]

    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = late
        await c.initialize(tmp_path, {})
        uri = c.open(write_model(tmp_path), MODEL)
        started = time.monotonic()
        first = await c.command("fusionlens.compile", uri, None, timeout=CONFIG_NOTICE_S + 20)
        assert first["result"]["ok"] is False and "waiting for the client's settings" in first["result"]["message"]
        assert time.monotonic() - started >= CONFIG_NOTICE_S - 1  # it waited for the answer first
        again = await c.command("fusionlens.compile", uri, None, timeout=5)  # overdue: refused at once
        assert again["result"]["ok"] is False
        info = await _debug(c)
        assert info["workerPid"] is None and "compiling" not in _statuses(c)  # nothing ran
        notices = [t for t in c.texts("window/logMessage") if "no answer to workspace/configuration" in t]
        assert len(notices) == 1, c.texts("window/logMessage")
        release.set()  # the answer, later than 10 s
        deadline = time.monotonic() + 10
        while (await _debug(c))["settings"]["allowExecution"] is not False:
            assert time.monotonic() < deadline, "the late answer was dropped"
            await asyncio.sleep(0.05)
        refused = await c.command("fusionlens.compile", uri, None)
        assert refused["result"]["ok"] is False and "disabled" in refused["result"]["message"]
        lenses = (await c.request("textDocument/codeLens", {"textDocument": {"uri": uri}}))["result"]
        assert lenses and all(le["command"]["title"].startswith("Not compiled: execution disabled") for le in lenses)
        assert (await _debug(c))["workerPid"] is None
        shown = c.texts("window/showMessage") + c.texts("window/logMessage")
        assert not [m for m in shown if "CANCELLED" in m or "Error in server" in m], shown


@pytest.mark.asyncio
async def test_the_open_compiles_once_the_answer_says_so(tmp_path):
    """An open waits for the answer (default debounce 300 ms: it would have started), then
    compiles under the settings the answer gave."""
    release = asyncio.Event()

    async def held(params):
        await release.wait()
        return [{"debounceMs": 0, "benchmarkRepeats": 2}]

    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = held
        await c.initialize(tmp_path, {})
        c.open(write_model(tmp_path), MODEL)
        await asyncio.sleep(1.0)  # past the default debounce
        assert "compiling" not in _statuses(c) and (await _debug(c))["workerPid"] is None
        release.set()
        deadline = time.monotonic() + 60
        while "idle" not in _statuses(c):
            assert time.monotonic() < deadline, "the open did not compile after the answer"
            await asyncio.sleep(0.05)
        assert _statuses(c)[0] == "compiling"
        assert (await _debug(c))["settings"]["benchmarkRepeats"] == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("answer", [{"allowExecution": "no"}, {"allowExecution": 0}, {"allowExecution": None},
                                    {"AllowExecution": False}])
async def test_unsafe_or_unknown_answers_run_nothing(tmp_path, answer):
    async def quick(params):
        return [answer]

    async with stdio_server(tmp_path) as c:
        c.answers["workspace/configuration"] = quick
        await c.initialize(tmp_path, {"compileTriger": "manual", "debounceMs": 0})
        uri = c.open(write_model(tmp_path), MODEL)
        result = (await c.command("fusionlens.compile", uri, None))["result"]
        assert result["ok"] is False and "disabled" in result["message"], result
        info = await _debug(c)
        assert info["workerPid"] is None and info["settings"]["allowExecution"] is False
        warnings = [m["params"]["message"] for m in c.notes if m.get("method") == "window/showMessage"
                    and m["params"]["type"] == 2]
        assert any('"compileTriger"' in w for w in warnings), warnings  # the unknown key, named
        if "AllowExecution" in answer:
            assert any('"AllowExecution" is not allowExecution' in w for w in warnings), warnings


def test_unknown_keys_are_named_in_a_warning():
    from lsp_server.settings import Settings

    s = Settings()
    changed, warnings = s.update({"fusionlens": {"AllowExecution": True, "benchmarkRepet": 3, "pythonPath": "p"}})
    assert changed == [] and len(warnings) == 1 and s.allowExecution is True  # a misspelt true: still a warning
    assert '"AllowExecution"' in warnings[0] and '"benchmarkRepet"' in warnings[0] and "pythonPath" not in warnings[0]


# --- 3. sockets and initialize ------------------------------------------------------------------

@pytest.mark.asyncio
async def test_tcp_takes_one_client_and_a_second_gets_nothing(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with server_process("--tcp", f"127.0.0.1:{port}", stderr=asyncio.subprocess.DEVNULL):
        editor = Raw(*await connect_tcp(port, time.monotonic() + 30))
        editor.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        assert "capabilities" in (await editor.initialize(tmp_path, {"compileTrigger": "manual"}))["result"]
        # the intruder: refused, or closed before it gets an answer; its didOpen and command go nowhere
        secret = tmp_path / "not_on_disk.py"
        try:
            intruder = Raw(*await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5))
        except OSError:
            intruder = None
        if intruder is not None:
            intruder.open(secret, MODEL)
            with pytest.raises((asyncio.TimeoutError, ConnectionError)):
                await intruder.command("fusionlens.compile", secret.as_uri(), None, timeout=3)
            await intruder.close()
        info = await _debug(editor)  # the editor's connection still answers
        assert info["workerPid"] is None
        regions = (await editor.request("fusionlens/regions", {"uri": secret.as_uri()}))["result"]
        assert regions["targets"] == []  # the intruder's document was never opened
        await editor.close()


@pytest.mark.asyncio
async def test_nothing_before_initialize(tmp_path):
    """LSP: before `initialize`, requests get ServerNotInitialized (-32002) and notifications
    are dropped: a document opened then does not exist, a command does not run."""
    secret = tmp_path / "not_on_disk.py"
    async with stdio_server(tmp_path) as c:
        c.open(secret, MODEL)
        early = await c.command("fusionlens.compile", secret.as_uri(), None)
        assert early.get("error", {}).get("code") == -32002, early
        assert (await c.command("fusionlens.debugInfo")).get("error", {}).get("code") == -32002
        c.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        assert "result" in await c.initialize(tmp_path, {"compileTrigger": "manual"})
        again = await c.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert again.get("error", {}).get("code") == -32600, again
        regions = (await c.request("fusionlens/regions", {"uri": secret.as_uri()}))["result"]
        assert regions["targets"] == []
        assert (await _debug(c))["workerPid"] is None


@pytest.mark.asyncio
async def test_unix_socket_is_private_and_takes_one_client(tmp_path):
    path = tmp_path / "run" / "fl.sock"
    async with server_process("--socket", str(path), stderr=asyncio.subprocess.DEVNULL) as proc:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline and proc.returncode is None, "no socket"
            await asyncio.sleep(0.05)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        editor = Raw(*await asyncio.open_unix_connection(str(path)))
        editor.answers["workspace/configuration"] = lambda params: asyncio.sleep(0, [{}])
        assert "result" in await editor.initialize(tmp_path, {"compileTrigger": "manual"})
        with pytest.raises(OSError):
            await asyncio.open_unix_connection(str(path))  # the listener is gone
        assert (await _debug(editor))["workerPid"] is None
        await editor.close()


def test_a_socket_in_a_shared_folder_is_refused(tmp_path):
    import subprocess

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    done = subprocess.run([sys.executable, "-m", "lsp_server", "--socket", str(shared / "fl.sock")], cwd=REPO,
                          env=server_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "only you can use" in done.stderr
    assert not (shared / "fl.sock").exists()


# --- 4. the cache folder ------------------------------------------------------------------------

async def _trace(start_server, tmp_path, settings=None, env=None):
    """A compiled target and fusionlens.showTrace's answer (its file is model.model_example.execution.py)."""
    s = await start_server({"compileTrigger": "manual", **(settings or {})}, root=tmp_path, env={**FAKE, **(env or {})})
    uri = s.open(write_model(tmp_path))
    assert (await s.compile(uri, "model_example"))["ok"]
    return s, await s.command("fusionlens.showTrace", uri, "model_example")


TRACE = "model.model_example.execution.py"


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_a_planted_symlink_is_replaced_not_followed(start_server, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    victim.chmod(0o644)
    generated = tmp_path / "cache" / "generated"
    generated.mkdir(parents=True, mode=0o700)
    (generated / TRACE).symlink_to(victim)
    s, shown = await _trace(start_server, tmp_path)
    assert victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    written = generated / TRACE
    assert not written.is_symlink() and "model_example" in written.read_text()
    assert stat.S_IMODE(written.lstat().st_mode) == 0o444 and shown["uri"] == written.as_uri()
    assert not [p for p in generated.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_a_planted_folder_symlink_is_refused(start_server, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "generated").symlink_to(elsewhere)
    s, shown = await _trace(start_server, tmp_path)
    assert shown["uri"] is None and "symlink" in shown["message"]
    assert list(elsewhere.iterdir()) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_the_default_folder_is_made_private(start_server, tmp_path):
    """No cacheFolder: $XDG_CACHE_HOME/fusionlens-lsp; one found 0777 is made 0700."""
    root = tmp_path / "xdg" / "fusionlens-lsp"
    root.mkdir(parents=True)
    root.chmod(0o777)
    s, shown = await _trace(start_server, tmp_path, {"cacheFolder": None}, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert shown["uri"] == (root / "generated" / TRACE).as_uri()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE((root / "generated").stat().st_mode) == 0o700


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_a_tmp_folder_of_another_user_is_refused(start_server, tmp_path):
    """No cache folder of the platform (HOME is a file): <tmp>/fusionlens-lsp-<uid>, which
    someone else made first."""
    if os.getuid() != 0:
        pytest.skip("making a folder owned by another user needs root")
    home, tmp = tmp_path / "home-is-a-file", tmp_path / "tmp"
    home.write_text("")
    root = tmp / f"fusionlens-lsp-{os.getuid()}"
    root.mkdir(parents=True)
    os.chown(root, 65534, 65534)
    env = {"HOME": str(home), "XDG_CACHE_HOME": "", "TMPDIR": str(tmp)}
    s, shown = await _trace(start_server, tmp_path, {"cacheFolder": None}, env)
    assert shown["uri"] is None and "owned by uid 65534" in shown["message"], shown
    assert list(root.iterdir()) == []


def test_write_private_unit(tmp_path):
    """The same rules without a server: a planted link replaced, a folder of the wrong owner refused."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "root" / "sub").mkdir(parents=True)
    (tmp_path / "root" / "sub" / "f.py").symlink_to(victim)
    path = write_private(str(tmp_path / "root"), "sub", "f.py", "new", root_is_ours=True)
    assert Path(path).read_text() == "new" and victim.read_text() == "precious"
    assert stat.S_IMODE((tmp_path / "root").stat().st_mode) == 0o700
    if os.getuid() == 0:
        os.chown(tmp_path / "root" / "sub", 65534, 65534)
        with pytest.raises(UnsafeFolder, match="owned by uid 65534"):
            write_private(str(tmp_path / "root"), "sub", "g.py", "x", root_is_ours=True)
