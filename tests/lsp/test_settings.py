"""Settings are checked by type and range; allowExecution false wins until a restart."""

from __future__ import annotations

import pytest
from lsprotocol import types as T

from lsp_helpers import EXAMPLES
from lsp_server.settings import Settings

DEFAULTS = Settings()

BAD = {  # setting -> values a hand-written client config might send, each refused
    "allowExecution": ["false", "true", 0, 1, None, [], {}],
    "compileTrigger": ["onopen", "always", 1, None, True],
    "executors": ["triton", [], [1, 2], ["triton", None], ["tri ton"], {"a": 1}],
    "benchmarkRepeats": ["20", 0, -3, 10_001, 2.5, True, None],
    "device": ["gpu", 0, None, "cuda:x", ""],
    "timeoutSeconds": ["60", 0, -1, 1e9, True, None],
    "inlayHints": ["false", 1, None],
    "debounceMs": ["300", -1, 60_001, 1.5, False],
    "cacheFolder": [3, ["/tmp"], "a\0b"],
    "targetGpu": ["TPU v5", "", None, 4090, ["H100"]],
}


@pytest.mark.parametrize("name,value", [(n, v) for n, vs in BAD.items() for v in vs])
def test_a_bad_value_is_refused_with_a_warning_naming_it(name, value):
    s = Settings()
    changed, warnings = s.update({name: value})
    assert len(warnings) == 1 and warnings[0].startswith(f"fusionlens.{name}: ") and "refused" in warnings[0]
    if name == "allowExecution":  # the safe value, not the default
        assert s.allowExecution is False and changed == ["allowExecution"]
        assert "disabled" in warnings[0]
    else:
        assert getattr(s, name) == getattr(DEFAULTS, name) and changed == []


@pytest.mark.parametrize("name,value", [
    ("allowExecution", False), ("compileTrigger", "manual"), ("executors", ["triton", "torch"]),
    ("executors", None), ("benchmarkRepeats", 5), ("device", "cuda:1"), ("timeoutSeconds", 2),
    ("inlayHints", False), ("debounceMs", 0), ("cacheFolder", "/tmp/fl"), ("targetGpu", "L4")])
def test_a_good_value_is_taken(name, value):
    s = Settings()
    changed, warnings = s.update({"fusionlens": {name: value}})
    assert warnings == [] and getattr(s, name) == value


def test_one_bad_value_leaves_the_others_alone():
    s = Settings()
    changed, warnings = s.update({"benchmarkRepeats": "many", "debounceMs": 10, "unknownKey": 1})
    assert changed == ["debounceMs"] and s.benchmarkRepeats == 20 and len(warnings) == 2
    assert '"unknownKey"' in warnings[0]  # an unknown key is named (issue 22)


def test_a_false_from_any_source_wins_until_restart():
    s = Settings()
    s.update({"allowExecution": False})  # initializationOptions
    changed, warnings = s.update({"allowExecution": True})  # a later workspace/configuration answer
    assert s.allowExecution is False and changed == [] and "restart the server" in warnings[0]
    s = Settings()
    s.update({"allowExecution": True})
    s.update({"allowExecution": False})
    s.update({"allowExecution": True})
    assert s.allowExecution is False


def test_not_an_object():
    s = Settings()
    assert s.update(None) == ([], [])
    changed, warnings = s.update("allowExecution=false")
    assert changed == [] and "must be an object" in warnings[0]



@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["neovim"])
async def test_string_false_in_initialization_options_runs_nothing(start_server):
    s = await start_server({"allowExecution": "false", "compileTrigger": "onOpen"},
                           env={"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:compile_target"})
    uri = s.open(EXAMPLES / "mlp.py")
    result = await s.compile(uri, None)
    assert result["ok"] is False and "disabled" in result["message"]
    info = await s.command("fusionlens.debugInfo")
    assert info["workerPid"] is None  # no worker was ever started: no user code ran
    warnings = [m.message for m in s.client.messages if m.type == T.MessageType.Warning]
    assert any("fusionlens.allowExecution: \"false\" refused" in m for m in warnings), warnings
    lenses = await s.lenses(uri)
    assert all(l.command.title.startswith("Not compiled: execution disabled") for l in lenses)


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["visual-studio-code"])
async def test_configuration_true_does_not_override_initialization_false(start_server):
    s = await start_server({"allowExecution": False}, env={"FUSIONLENS_WORKER_COMPILE": "lsp_fake_compile:compile_target"})
    s.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"fusionlens": {"allowExecution": True}}))
    uri = s.open(EXAMPLES / "mlp.py")
    result = await s.compile(uri, None)
    assert result["ok"] is False and "disabled" in result["message"]
    assert (await s.command("fusionlens.debugInfo"))["workerPid"] is None


def test_target_gpu_takes_any_spelling_of_a_table_key():
    s = Settings()
    assert s.update({"targetGpu": "rtx 4090"}) == (["targetGpu"], []) and s.targetGpu == "RTX 4090"
    assert s.options_key()[-1] == "RTX 4090"  # another GPU is another compile result
