"""The typed Python client against the real toolwire binary.

TOOLWIRE_BIN names the binary (the Rust test that runs this suite sets it).
"""

import os
from pathlib import Path

import pytest

from toolwire_client import ToolwireClient, ToolwireError
from toolwire_client import models as m

BINARY = os.environ.get("TOOLWIRE_BIN") or str(
    Path(__file__).resolve().parents[3] / "target" / "debug" / "toolwire"
)


@pytest.fixture
def client(tmp_path):
    c = ToolwireClient(BINARY, tmp_path, m.Config(durability=m.Durability.none))
    yield c
    assert c.close() == 0


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


def test_initialize_lists_every_method(client):
    caps = client.initialize_result.capabilities.experimental.toolwire
    assert caps.protocol_version == 1
    assert {"budget/apply", "state/fork", "pair/append", "pair/flush"} <= set(caps.methods)


def test_budget_apply_persists_and_replays(client, tmp_path):
    params = m.BudgetApplyParams(session_id="py", messages=[call("t1"), result("t1", "p" * 60_000)])
    first = client.budget_apply(params)
    assert [p.tool_use_id for p in first.persisted] == ["t1"]
    assert first.persisted[0].content_type == m.ArtifactKind.text
    assert Path(first.persisted[0].path).read_text() == "p" * 60_000
    sent = first.messages[1].content[0].model_extra["content"]
    assert sent.startswith("<persisted-output>\nOutput too large (58.6KB).")
    again = client.budget_apply(params)
    assert again.records == [] and again.messages == first.messages


def test_pairs_fork_and_errors(client):
    assert client.pair_append(m.PairAppendParams(session_id="py", message=call("t2"))).status == m.AppendStatus.buffered
    done = client.pair_append(m.PairAppendParams(session_id="py", message=result("t2", "ok")))
    assert (done.status, done.written) == (m.AppendStatus.committed, 2)
    with pytest.raises(ToolwireError) as err:
        client.pair_append(m.PairAppendParams(session_id="py", message=result("t2", "late")))
    assert err.value.code == -32010 and err.value.data.kind == "unknownToolResult"

    client.budget_apply(m.BudgetApplyParams(session_id="py", messages=[result("t3", "f" * 60_000)]))
    fork = client.state_fork(m.StateForkParams(session_id="py", new_session_id="py-fork"))
    assert (fork.seen_count, fork.replacement_count) == (1, 1)
    state = client.state_get(m.StateGetParams(session_id="py-fork"))
    assert state.seen_ids == ["t3"] and "t3" in state.replacements
    with pytest.raises(ToolwireError) as err:
        client.state_fork(m.StateForkParams(session_id="py", new_session_id="py-fork"))
    assert err.value.data.kind == "sessionExists"

    client.pair_append(m.PairAppendParams(session_id="py", message=call("t4")))
    flushed = client.pair_flush(m.PairFlushParams(session_id="py", mode=m.AbortMode.synthetic, reason="test"))
    assert flushed.synthesized == ["t4"]
