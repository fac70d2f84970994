"""The installed toolwire-client package against the real toolwire binary.

Run by scripts/test_installed.py from a fresh venv where only the built
wheel is installed (so this tests what users get, not the source tree), with
TOOLWIRE_BIN naming the binary and XDG_RUNTIME_DIR a private directory for
the shared daemons' sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import sysconfig
import threading
from decimal import Decimal
from pathlib import Path

import pytest

import toolwire_client
from toolwire_client import (
    METHOD_NAMES,
    ArtifactNotFoundError,
    AsyncToolwireClient,
    CancelledError,
    CancelToken,
    InvalidParamsError,
    SessionExistsError,
    ToolwireClient,
    ToolwireError,
    ToolwireExitedError,
    ToolwireNotFoundError,
    UnknownToolResultError,
    locate_toolwire,
)
from toolwire_client import _wire
from toolwire_client import models as m

BINARY = os.environ["TOOLWIRE_BIN"]
NONE = m.Config(durability=m.Durability.none)


def call(tool_id: str) -> m.Message:
    return m.Message(
        role=m.Role.assistant,
        content=[m.ContentItem(type="tool_use", id=tool_id, name="Bash", input={"command": "make"})],
    )


def result(tool_id: str, text: str) -> m.Message:
    return m.Message(
        role=m.Role.user,
        content=[m.ContentItem(type="tool_result", tool_use_id=tool_id, content=text)],
    )


def line(message: m.Message) -> str:
    return json.dumps({"type": "message", "message": message.model_dump(by_alias=True, exclude_none=True)}) + "\n"


def big_transcript(path: Path, pairs: int = 300) -> Path:
    with path.open("w") as f:
        for i in range(pairs):
            f.write(line(call(f"r{i}")) + line(result(f"r{i}", "y" * 100_000)))
    return path


@pytest.fixture
def client(tmp_path):
    # Found through TOOLWIRE_BIN; the shared daemon (the default).
    c = ToolwireClient.start(tmp_path, idle_timeout=1, config=NONE)
    yield c
    assert c.close() == 0


def test_the_package_is_the_installed_wheel():
    assert Path(toolwire_client.__file__).is_relative_to(sys.prefix), toolwire_client.__file__
    assert (Path(toolwire_client.__file__).parent / "py.typed").exists()


def test_the_binary_is_found_from_a_setting_the_environment_or_path(tmp_path):
    assert locate_toolwire(BINARY) == Path(BINARY).absolute()
    assert locate_toolwire(env={"TOOLWIRE_BIN": BINARY, "PATH": ""}) == Path(BINARY).absolute()
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "toolwire").symlink_to(BINARY)
    assert locate_toolwire(env={"PATH": str(on_path)}) == on_path / "toolwire"
    with pytest.raises(ToolwireNotFoundError) as err:
        ToolwireClient.start(tmp_path, env={"PATH": str(tmp_path / "empty")})
    assert err.value.searched == [
        "setting: not set",
        "TOOLWIRE_BIN: not set",
        # This venv has toolwire_client but not the toolwire wheel.
        f"pip package: {Path(sysconfig.get_path('scripts')) / 'toolwire'} (does not exist)",
        f"PATH: no executable 'toolwire' in {tmp_path / 'empty'}",
    ]
    with pytest.raises(ToolwireNotFoundError, match=r"toolwire\.binary: /nonexistent/toolwire \(does not exist\)"):
        locate_toolwire("/nonexistent/toolwire", setting_name="toolwire.binary")


def test_initialize_lists_every_method(client):
    caps = client.initialize_result.capabilities.experimental.toolwire
    assert set(METHOD_NAMES) <= set(caps.methods)
    for name in METHOD_NAMES:
        # budget/apply -> budget_apply, state/get -> state_get, ...
        py = "_".join(re.sub(r"(?<!^)([A-Z])", r"_\1", part).lower() for part in name.split("/"))
        assert callable(getattr(client, py, None)), name


def test_budget_apply_persists_and_replays(client):
    params = m.BudgetApplyParams(session_id="py", messages=[call("t1"), result("t1", "p" * 60_000)])
    first = client.budget_apply(params)
    assert [p.tool_use_id for p in first.persisted] == ["t1"]
    assert first.persisted[0].content_type == m.ArtifactKind.text
    assert Path(first.persisted[0].path).read_text() == "p" * 60_000
    sent = first.messages[1].root.content[0].model_extra["content"]
    assert sent.startswith("<persisted-output>\nOutput too large (58.6KB).")
    again = client.budget_apply(params)
    assert again.records == [] and again.messages == first.messages
    page = client.artifact_read(m.ArtifactReadParams(session_id="py", tool_use_id="t1"))
    assert (page.text, page.total_lines, page.truncated) == ("p" * 60_000, 1, False)
    with pytest.raises(ArtifactNotFoundError) as err:
        client.artifact_read(m.ArtifactReadParams(session_id="py", tool_use_id="nope"))
    assert err.value.code == -32015 and err.value.kind == "artifactNotFound"


def test_pairs_fork_and_typed_errors(client):
    assert client.pair_append(m.PairAppendParams(session_id="py", message=call("t2"))).status == m.AppendStatus.buffered
    done = client.pair_append(m.PairAppendParams(session_id="py", message=result("t2", "ok")))
    assert (done.status, done.written) == (m.AppendStatus.committed, 2)
    with pytest.raises(UnknownToolResultError) as err:
        client.pair_append(m.PairAppendParams(session_id="py", message=result("t2", "late")))
    assert isinstance(err.value, ToolwireError)
    assert err.value.code == -32010 and err.value.kind == "unknownToolResult"

    client.budget_apply(m.BudgetApplyParams(session_id="py", messages=[result("t3", "f" * 60_000)]))
    fork = client.state_fork(m.StateForkParams(session_id="py", new_session_id="py-fork"))
    assert (fork.seen_count, fork.replacement_count) == (1, 1)
    state = client.state_get(m.StateGetParams(session_id="py-fork"))
    assert state.seen_ids == ["t3"] and "t3" in state.replacements
    with pytest.raises(SessionExistsError):
        client.state_fork(m.StateForkParams(session_id="py", new_session_id="py-fork"))
    with pytest.raises(InvalidParamsError) as bad:
        client.request("state/get", {"sessionId": "../x"})
    assert bad.value.data is not None and bad.value.data.path == "sessionId"

    client.pair_append(m.PairAppendParams(session_id="py", message=call("t4")))
    flushed = client.pair_flush(m.PairFlushParams(session_id="py", mode=m.AbortMode.synthetic, reason="test"))
    assert flushed.synthesized == ["t4"]


def test_two_clients_of_a_workspace_share_one_daemon(client, tmp_path):
    client.budget_apply(m.BudgetApplyParams(session_id="both", messages=[result("s1", "s" * 60_000)]))
    with ToolwireClient.start(tmp_path, binary=BINARY, idle_timeout=1) as other:
        assert other.state_get(m.StateGetParams(session_id="both")).seen_ids == ["s1"]


def test_progress_and_cancellation(client, tmp_path):
    transcript = big_transcript(tmp_path / "big.jsonl")
    progress: list[object] = []
    began = threading.Event()
    token = CancelToken()

    def on_progress(value: object) -> None:
        progress.append(value)
        began.set()
        # Cancelled during the call: once the budget/apply queued behind
        # this reconstruction (same session) is in flight.
        if len(client._pending) >= 2:
            token.cancel()

    out: dict[str, m.StateReconstructResult] = {}
    worker = threading.Thread(
        target=lambda: out.update(
            r=client.state_reconstruct(
                m.StateReconstructParams(session_id="big", transcript=str(transcript)), on_progress=on_progress
            )
        )
    )
    worker.start()
    assert began.wait(60)
    with pytest.raises(CancelledError) as err:
        client.budget_apply(m.BudgetApplyParams(session_id="big", messages=[result("c1", "z" * 60_000)]), cancel=token)
    assert (err.value.code, err.value.message) == (-32800, "request cancelled"), "the server's answer"
    worker.join(60)
    assert out["r"].seen_count == 300
    assert progress[0]["kind"] == "begin" and progress[-1]["kind"] == "end"
    assert "c1" not in client.state_get(m.StateGetParams(session_id="big")).seen_ids

    # A token cancelled before the call: nothing is sent.
    with pytest.raises(CancelledError) as err:
        client.budget_apply(m.BudgetApplyParams(session_id="pre", messages=[result("p1", "z" * 60_000)]), cancel=token)
    assert (err.value.code, err.value.kind, err.value.message) == (-32800, "cancelled", "request cancelled before it was sent")
    assert client.state_get(m.StateGetParams(session_id="pre")).seen_ids == []

    broken = tmp_path / "broken.jsonl"
    broken.write_text(line(call("o1")) + line(m.Message(role=m.Role.user, content="hi")))
    repair_progress: list[object] = []
    repaired = client.transcript_repair(m.TranscriptRepairParams(path=str(broken)), on_progress=repair_progress.append)
    assert repaired.dropped_tool_uses == ["o1"]
    assert len(repair_progress) >= 2


def test_async_client(tmp_path):
    async def main() -> None:
        async with await AsyncToolwireClient.start(tmp_path, idle_timeout=1, config=NONE) as c:
            assert set(METHOD_NAMES) <= set(c.server_methods)
            applied = await c.budget_apply(
                m.BudgetApplyParams(session_id="aio", messages=[call("a1"), result("a1", "q" * 60_000)])
            )
            assert [p.tool_use_id for p in applied.persisted] == ["a1"]
            # Pipelined: both calls are in flight at once.
            buffered, state = await asyncio.gather(
                c.pair_append(m.PairAppendParams(session_id="aio", message=call("a2"))),
                c.state_get(m.StateGetParams(session_id="aio")),
            )
            assert buffered.pending == ["a2"] and state.seen_ids == ["a1"]
            with pytest.raises(UnknownToolResultError):
                await c.pair_append(m.PairAppendParams(session_id="aio", message=result("zz", "x")))
            flushed = await c.pair_flush(m.PairFlushParams(session_id="aio", mode=m.AbortMode.discard))
            assert flushed.discarded == ["a2"]

            # Cancelling the awaiting task cancels the request on the server.
            transcript = big_transcript(tmp_path / "big.jsonl")
            began = asyncio.Event()
            rebuilt = asyncio.create_task(
                c.state_reconstruct(
                    m.StateReconstructParams(session_id="abig", transcript=str(transcript)),
                    on_progress=lambda _v: began.set(),
                )
            )
            await asyncio.wait_for(began.wait(), 60)
            applying = asyncio.create_task(
                c.budget_apply(m.BudgetApplyParams(session_id="abig", messages=[result("c2", "z" * 60_000)]))
            )
            await asyncio.sleep(0)  # let the request go out
            applying.cancel()
            with pytest.raises(asyncio.CancelledError):
                await applying
            assert (await rebuilt).seen_count == 300
            # A token lets the server's answer through.
            token = CancelToken()
            token.cancel()
            rebuilt2 = asyncio.create_task(
                c.state_reconstruct(m.StateReconstructParams(session_id="abig2", transcript=str(transcript)))
            )
            await asyncio.sleep(0)
            with pytest.raises(CancelledError):
                await c.budget_apply(
                    m.BudgetApplyParams(session_id="abig2", messages=[result("c3", "z" * 60_000)]), cancel=token
                )
            await rebuilt2
            assert "c2" not in (await c.state_get(m.StateGetParams(session_id="abig"))).seen_ids
            assert "c3" not in (await c.state_get(m.StateGetParams(session_id="abig2"))).seen_ids

    asyncio.run(main())


# A message exactly as a provider's API or SDK wrote it: nulls, its own key
# order, unknown fields, numbers spelled 1.10 and -0.0.
EXACT = (
    '{"role":"user","z":1.10,"content":[{"type":"text","text":"hé","cache_control":null,'
    '"n":[1.10,2,-0.0]}],"metadata":null}'
)


def test_messages_pass_through_byte_for_byte_typed_or_not(tmp_path):
    # Read the way a harness keeps numbers as written (parse_float=Decimal).
    message = json.loads(EXACT, parse_float=Decimal)
    # What the client writes is recorded by a tee in front of the real server.
    sent = tmp_path / "sent"
    command = ["sh", "-c", f'tee "$1" | "$2" serve', "sh", str(sent), BINARY]
    with ToolwireClient.start(tmp_path, command=command, config=NONE) as c:
        c.budget_apply(m.BudgetApplyParams(session_id="typed", messages=[message]))  # the README's example
        c.pair_append(m.PairAppendParams(session_id="typed", message=message))
        c.request("budget/apply", {"sessionId": "raw", "messages": [message]})
    wire = sent.read_bytes().decode()
    assert wire.count('"messages":[' + EXACT + "]") == 2, wire
    assert wire.count('"message":' + EXACT + "}") == 1, wire
    # The server keeps what it received.
    kept = (tmp_path / ".toolwire" / "sessions" / "typed.jsonl").read_text()
    assert kept == '{"type":"message","message":' + EXACT + "}\n"
    # A message changed after it was validated is sent as it now is.
    params = m.BudgetApplyParams(session_id="x", messages=[message])
    params.messages[0].root.content[0].text = "changed"
    assert b'"text":"changed"' in _wire.encode(_wire.dump_params(params))


def test_a_binary_that_dies_at_start_says_why_once(tmp_path, capfd):
    dying = tmp_path / "dying"
    dying.write_text("#!/bin/sh\necho 'cannot open the store: permission denied' >&2\necho 'second line' >&2\nexit 3\n")
    dying.chmod(0o755)
    said = f"toolwire: {dying} exited (status 3) before initializing:\ncannot open the store: permission denied\nsecond line"
    for _ in range(5):
        with pytest.raises(ToolwireExitedError) as err:
            ToolwireClient.start(tmp_path, binary=dying)
        assert (str(err.value), err.value.status) == (said, "status 3")

    async def main() -> None:
        with pytest.raises(ToolwireExitedError) as err:
            await AsyncToolwireClient.start(tmp_path, binary=dying)
        assert str(err.value) == said

    asyncio.run(main())
    # Its stderr still reaches ours, as a log does.
    assert "cannot open the store" in capfd.readouterr().err
