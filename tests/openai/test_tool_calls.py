"""Tool calling through the official `openai` client: a forced call (named, and
`required` with one tool) comes back as `tool_calls`, streamed as deltas that the
client reassembles; the returned message and a tool result continue the chat.
The default 135M model follows one earlier call in the conversation."""

import json

import pytest

MODEL = "smol"
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
HISTORY = [
    {"role": "user", "content": "What is the weather in London?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"London\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature_c\": 14}"},
    {"role": "assistant", "content": "It is 14 degrees in London."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def ask(client, **kw):
    kw.setdefault("tool_choice", NAMED)
    kw.setdefault("max_tokens", 40)
    return client.chat.completions.create(model=MODEL, messages=HISTORY, tools=TOOLS, temperature=0, **kw)


@pytest.mark.parametrize("tool_choice", [NAMED, "required"])
def test_forced_call_is_returned_as_tool_calls(client, tool_choice):
    r = ask(client, tool_choice=tool_choice)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_streamed_tool_call_deltas_reassemble(client):
    whole = ask(client).choices[0].message.tool_calls[0]
    calls, content, finish = {}, "", None
    for chunk in ask(client, stream=True):
        for c in chunk.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = d.id or call["id"]
                if d.function.name:
                    call["name"] += d.function.name
                call["arguments"] += d.function.arguments or ""
            finish = c.finish_reason or finish
    assert content == ""
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["name"] == whole.function.name
    assert json.loads(calls[0]["arguments"]) == json.loads(whole.function.arguments)
    assert calls[0]["id"].startswith("call_")


def test_call_result_continues_and_none_offers_no_tools(client):
    message = ask(client).choices[0].message
    follow = HISTORY + [
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "{\"temperature_c\": 18}"},
    ]
    r = client.chat.completions.create(model=MODEL, messages=follow, tools=TOOLS, temperature=0, max_tokens=16)
    assert isinstance(r.choices[0].message.content, str)
    r = ask(client, tool_choice="none", max_tokens=12)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason != "tool_calls"
