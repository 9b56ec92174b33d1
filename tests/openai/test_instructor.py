"""`instructor` (structured extraction over the official `openai` client) against `wring serve`,
as a newcomer would call it: no temperature, no max_tokens. Its TOOLS mode sends a named
tool_choice (a grammar-constrained call), JSON sends `response_format: {"type": "json_object"}`
with the schema in the prompt, and JSON_SCHEMA sends the schema inside `response_format`
itself (`{"type": "json_object", "schema": ...}`), which the server must honour. Every answer
must be a finished (`finish_reason` "stop") object that validates into the pydantic model;
the 135M model's content may be poor, the shape may not."""

import json

import instructor
import pydantic
import pytest

MODEL = "smol"
TEXT = "Ann Smith is 31 years old and lives in Paris."


class Person(pydantic.BaseModel):
    name: str
    age: int
    city: str


MODES = [instructor.Mode.TOOLS, instructor.Mode.JSON, instructor.Mode.JSON_SCHEMA]


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_instructor_gets_a_finished_object_in_each_mode(client, mode, seed):
    """TOOLS and JSON_SCHEMA constrain the reply to the model's schema, so it must validate.
    JSON constrains it to some object only (the schema is in the prompt): it must close, but
    the 135M model may write the schema itself instead of a person, which instructor then
    rejects; that is the model's content, not the server's."""
    ic = instructor.from_openai(client, mode=mode)
    raw = []
    ic.on("completion:response", raw.append)
    try:
        person = ic.chat.completions.create(
            model=MODEL,
            response_model=Person,
            max_retries=0,
            seed=seed,
            messages=[{"role": "user", "content": f"Extract the person: {TEXT}"}],
        )
    except Exception as e:  # instructor's validation failure, for JSON mode only
        if mode != instructor.Mode.JSON:
            raise
        person = e
    completion = raw[-1]
    choice = completion.choices[0]
    assert choice.finish_reason in ("stop", "tool_calls"), choice
    assert completion.usage.completion_tokens < 2048
    if mode == instructor.Mode.JSON:
        assert isinstance(json.loads(choice.message.content), dict), choice.message.content
    else:
        assert isinstance(person, Person), person


def test_a_schema_beside_json_object_is_enforced(client):
    """JSON_SCHEMA's wire shape sent directly: the reply has exactly the schema's keys, which
    plain json_object would not force."""
    schema = {
        "type": "object",
        "properties": {"zebra_count": {"type": "integer"}, "quux": {"type": "boolean"}},
        "required": ["zebra_count", "quux"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello."}],
        response_format={"type": "json_object", "schema": schema},
        temperature=0,
    )
    value = json.loads(r.choices[0].message.content)
    assert set(value) == {"zebra_count", "quux"}, value
    assert isinstance(value["zebra_count"], int) and isinstance(value["quux"], bool)
    assert r.choices[0].finish_reason == "stop"
