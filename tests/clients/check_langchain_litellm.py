"""LangChain's ChatOpenAI and LiteLLM, unmodified, against `ferry serve` with the default model:
tools bound with tool_choice required, and a pydantic model as the structured output. Clients no
one here wrote, so not in the pinned test venv (their pins fight the openai client's): run by
hand with `make clients`. Fails (non-zero) when a call or a parse does not come back."""
import json, sys
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "integration"))
from server_util import Server
from langchain_openai import ChatOpenAI
from langchain_core.tools import tool
from pydantic import BaseModel, Field
import litellm

@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city."""
    return "18 degrees, clear"

class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)

s = Server()
try:
    import httpx; mid = httpx.get(s.url + "/v1/models").json()["data"][0]["id"]
    llm = ChatOpenAI(base_url=s.url + "/v1", api_key="unused", model=mid, temperature=0, max_tokens=120)
    r = llm.bind_tools([get_weather], tool_choice="required", parallel_tool_calls=False).invoke("What's the weather in Paris?")
    print("langchain tools:", r.tool_calls)
    assert r.tool_calls and r.tool_calls[0]["name"] == "get_weather" and "city" in r.tool_calls[0]["args"]
    p = llm.with_structured_output(Person, method="json_schema").invoke("Invent a person.")
    print("langchain structured:", p)
    assert isinstance(p, Person)
    r = litellm.completion(model="openai/" + mid, api_base=s.url + "/v1", api_key="unused",
        messages=[{"role": "user", "content": "Weather in Rome?"}], max_tokens=120, temperature=0,
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}],
        tool_choice="required", parallel_tool_calls=False)
    print("litellm tools:", r.choices[0].message.tool_calls, r.choices[0].finish_reason)
    assert r.choices[0].finish_reason == "tool_calls"
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments)["city"]
    r = litellm.completion(model="openai/" + mid, api_base=s.url + "/v1", api_key="unused",
        messages=[{"role": "user", "content": "Invent a person."}], max_tokens=120, temperature=0,
        response_format=Person)
    print("litellm structured:", r.choices[0].message.content)
    Person.model_validate_json(r.choices[0].message.content)
finally:
    s.stop()
