"""Structured output through real clients against `wring serve`: the official `openai`
client with `response_format` (json_object, json_schema validated by `jsonschema`, and
its pydantic `parse` helper), vLLM's guided_choice / guided_regex through `extra_body`,
streamed tool calls with tool_choice `required` and a named function (arguments valid
under the tool's schema), and LangChain's `with_structured_output`. The 135M model
writes poor content; the grammar guarantees the shape, which is what is asserted."""

import json
import re

import jsonschema
import pydantic
import pytest

from conftest import API_KEY

MODEL = "smol"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"enum": ["chess", "music", "running"]}, "maxItems": 3},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}


def chat(client, content, **kw):
    kw.setdefault("max_tokens", 80)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kw)


def test_json_schema_reply_validates(client):
    r = chat(client, "Describe a person and their hobbies as JSON.",
             response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_json_object_reply_is_an_object(client):
    r = chat(client, "Give me a JSON object describing a cat.", response_format={"type": "json_object"}, max_tokens=60)
    choice = r.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content), dict)
    else:
        assert choice.finish_reason == "length" and choice.message.content.lstrip().startswith("{")


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    species: str = pydantic.Field(pattern="^(cat|dog|bird)$")
    age: int = pydantic.Field(ge=0, le=30)


def test_openai_parse_helper_returns_the_pydantic_model(client):
    r = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Describe a pet."}],
        response_format=Pet, temperature=0, max_tokens=60)
    pet = r.choices[0].message.parsed
    assert isinstance(pet, Pet)
    assert pet.species in ("cat", "dog", "bird")


def test_guided_choice_and_regex_through_extra_body(client):
    choices = ["positive", "negative", "neutral"]
    r = client.completions.create(model=MODEL, prompt=["I love this film. Sentiment:", "Terrible food. Sentiment:"],
                                  n=2, max_tokens=8, temperature=1.0, seed=5,
                                  extra_body={"guided_choice": choices})
    assert len(r.choices) == 4
    for c in r.choices:
        assert c.text in choices and c.finish_reason == "stop"
    r = chat(client, "What is a valid date?", max_tokens=20, extra_body={"guided_regex": r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"})
    text = r.choices[0].message.content
    assert re.fullmatch(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", text), text
    r = chat(client, "Yes or no?", max_tokens=8, extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert r.choices[0].message.content in ("yes", "no")


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["amount", "to"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "convert_currency"}}])
def test_streamed_forced_tool_calls_parse_and_validate(client, tool_choice):
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "How much is 20 euros in dollars?"}],
        tools=TOOLS, tool_choice=tool_choice, temperature=0, max_tokens=60, stream=True)
    calls, content, finish = {}, "", None
    for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"name": "", "arguments": ""})
                call["name"] += d.function.name or ""
                call["arguments"] += d.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    [call] = calls.values()
    if isinstance(tool_choice, dict):
        assert call["name"] == "convert_currency"
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


class City(pydantic.BaseModel):
    """A city and the country it is in."""

    city: str = pydantic.Field(max_length=24)
    country: str = pydantic.Field(max_length=24)
    population_millions: int = pydantic.Field(ge=0, le=50)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(server, method):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=server.base + "/v1", api_key=API_KEY, temperature=0,
                     max_tokens=80, max_retries=0, timeout=300)
    out = llm.with_structured_output(City, method=method).invoke("Name a large city.")
    assert isinstance(out, City)
