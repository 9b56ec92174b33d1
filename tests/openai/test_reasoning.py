"""A reasoning model through the official `openai` client, as an agent framework drives
one served by vLLM: `wring serve` on the tiny Qwen3 of tests/data/hf_tiny (its template has
Qwen3's `enable_thinking` switch; `--reasoning-parser` left at auto) with
`--default-chat-template-kwargs` and `--replay-outputs` (its random weights never close a
thinking block, so the outputs are scripted with `replay_output`). The client reads
`reasoning_content` beside `content`, whole and streamed; `chat_template_kwargs` in
`extra_body` overrides the server's default; a tool call after the thinking comes back as
`tool_calls`, and the returned message, thinking included, continues the chat."""

import json

import pytest

from conftest import repo_test_data, spawn, stop

MODEL = "tiny-qwen3"
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
THINK_ON = {"chat_template_kwargs": {"enable_thinking": True}}


@pytest.fixture(scope="module")
def reasoning_client(tmp_path_factory):
    import openai

    srv = spawn([
        "--model", str(repo_test_data() / "hf_tiny" / "qwen3"),
        "--served-model-name", MODEL, "--replay-outputs", "--stats-interval", "0",
        "--max-model-len", "1024", "--kv-cache-mib", "16",
        # Thinking off unless a request turns it on.
        "--default-chat-template-kwargs", '{"enable_thinking": false}',
    ], tmp_path_factory.mktemp("reasoning") / "serve.log")
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
    yield srv, client
    assert stop(srv) == 0, srv.log()[-3000:]


def ask(client, replay, extra=None, **kw):
    body = {"replay_output": replay, **(extra or {})}
    return client.chat.completions.create(
        model=MODEL, messages=kw.pop("messages", [{"role": "user", "content": "Capital of France?"}]),
        temperature=0, max_tokens=kw.pop("max_tokens", 200), extra_body=body, **kw)


def test_the_parser_is_said_at_start_up_and_in_models(reasoning_client):
    srv, client = reasoning_client
    assert "reasoning parser: qwen3 (auto" in srv.log()
    [card] = client.models.list().data
    assert card.model_extra["reasoning_parser"] == "qwen3"


def test_reasoning_content_beside_content_whole_and_streamed(reasoning_client):
    _, client = reasoning_client
    replay = "<think>\nFrance's capital is Paris.\n</think>\n\nParis."
    msg = ask(client, replay, THINK_ON).choices[0].message
    assert msg.reasoning_content == "\nFrance's capital is Paris.\n"
    assert msg.model_extra["reasoning"] == msg.reasoning_content
    assert msg.content == "\n\nParis."
    reasoning, content = "", ""
    for chunk in ask(client, replay, THINK_ON, stream=True):
        for c in chunk.choices:
            reasoning += getattr(c.delta, "reasoning_content", None) or ""
            content += c.delta.content or ""
    assert (reasoning, content) == (msg.reasoning_content, msg.content)


def test_the_servers_default_turns_thinking_off_and_a_request_wins(reasoning_client):
    _, client = reasoning_client
    # The default: the template writes an empty block, the whole output is the answer.
    msg = ask(client, "Paris.").choices[0].message
    assert msg.content == "Paris."
    assert getattr(msg, "reasoning_content", None) is None
    # vLLM's shorthand turns it back on.
    msg = ask(client, "<think>\nhm\n</think>\n\nParis.", {"reasoning_effort": "low"}).choices[0].message
    assert msg.reasoning_content == "\nhm\n"


def test_a_tool_call_after_thinking_and_the_message_sent_back(reasoning_client):
    _, client = reasoning_client
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    r = ask(client, f"<think>\nLook it up.\n</think>\n\n{call}", THINK_ON, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.reasoning_content == "\nLook it up.\n"
    assert choice.message.content is None
    [tc] = choice.message.tool_calls
    assert (tc.function.name, json.loads(tc.function.arguments)) == ("get_weather", {"city": "Paris"})
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": tc.id, "content": '{"temperature_c": 21}'},
    ]
    msg = ask(client, "<think>\n21 degrees.\n</think>\n\nIt is 21 °C.", THINK_ON,
              messages=history, tools=TOOLS).choices[0].message
    assert msg.content == "\n\nIt is 21 °C."


def test_bad_template_kwargs_are_refused(reasoning_client):
    import openai

    _, client = reasoning_client
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "x", {"chat_template_kwargs": {"enable_thinking": "yes"}})
    assert e.value.body["param"] == "chat_template_kwargs.enable_thinking"
