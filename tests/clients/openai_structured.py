"""Structured output through the official OpenAI Python client: `chat.completions.parse` with
Pydantic models (nested objects, arrays, enums, required and optional fields, bounded numbers),
20 prompts and schemas sent 8 at a time, plus `json_object`, streamed `json_schema` and
log-probabilities.

Usage: python3 openai_structured.py BASE_URL MODEL
Prints one JSON line with what it saw; exits non-zero on any client error.
"""
import enum
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import List, Literal, Optional

import openai
from pydantic import BaseModel, Field

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=600)

Short = Field(max_length=40)


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population: int = Field(ge=0, le=40_000_000)


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=120)
    email: Optional[str] = Field(default=None, max_length=40)


class Address(BaseModel):
    street: str = Field(max_length=40)
    city: str = Field(max_length=30)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Customer(BaseModel):
    person: Person
    address: Address
    vip: bool


class Book(BaseModel):
    title: str = Field(max_length=40)
    author: str = Field(max_length=40)
    year: int = Field(ge=1450, le=2030)
    genres: List[Literal["fiction", "history", "science", "poetry"]] = Field(max_length=3)


class Recipe(BaseModel):
    dish: str = Field(max_length=40)
    servings: int = Field(ge=1, le=12)
    ingredients: List[str] = Field(min_length=1, max_length=4)
    vegetarian: bool


class Weather(BaseModel):
    city: str = Field(max_length=30)
    temperature_c: float = Field(ge=-60, le=60)
    sky: Literal["sunny", "cloudy", "rainy", "snowy"]


class Paint(BaseModel):
    color: Color
    liters: float = Field(gt=0, le=20)


class Step(BaseModel):
    order: int = Field(ge=1, le=10)
    action: str = Field(max_length=40)


class Plan(BaseModel):
    goal: str = Field(max_length=40)
    steps: List[Step] = Field(min_length=1, max_length=3)


class Review(BaseModel):
    product: str = Field(max_length=40)
    stars: int = Field(ge=1, le=5)
    pros: List[str] = Field(max_length=2)
    cons: Optional[List[str]] = Field(default=None, max_length=2)


class Flight(BaseModel):
    origin: str = Field(pattern=r"^[A-Z]{3}$")
    destination: str = Field(pattern=r"^[A-Z]{3}$")
    seats: int = Field(ge=1, le=9)
    cabin: Literal["economy", "business", "first"]


class Sentiment(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    confidence: float = Field(ge=0, le=1)


class Point(BaseModel):
    x: int = Field(ge=-100, le=100)
    y: int = Field(ge=-100, le=100)


class Shape(BaseModel):
    kind: Literal["triangle", "square"]
    points: List[Point] = Field(min_length=3, max_length=4)


class Team(BaseModel):
    name: str = Field(max_length=30)
    members: List[Person] = Field(min_length=1, max_length=2)


class Movie(BaseModel):
    title: str = Field(max_length=40)
    rating: float = Field(ge=0, le=10)
    sequel: Optional[str] = Field(default=None, max_length=40)


class Inventory(BaseModel):
    item: str = Field(max_length=30)
    quantity: int = Field(ge=0, le=1000)
    tags: List[Literal["new", "sale", "used"]] = Field(max_length=3)


class Event(BaseModel):
    title: str = Field(max_length=40)
    day: Literal["monday", "tuesday", "wednesday", "thursday", "friday"]
    hour: int = Field(ge=0, le=23)
    online: bool


class Planet(BaseModel):
    name: str = Field(max_length=20)
    moons: int = Field(ge=0, le=200)
    rings: bool
    gas_giant: bool


class Song(BaseModel):
    title: str = Field(max_length=40)
    artist: str = Field(max_length=40)
    seconds: int = Field(ge=30, le=900)


class Answer(BaseModel):
    question: str = Field(max_length=60)
    answer: Literal["yes", "no"]
    reason: str = Field(max_length=60)


CASES = [
    ("Give a large city as JSON.", City),
    ("Invent a person with a name, an age and maybe an email.", Person),
    ("Create a customer record with a person and a US address.", Customer),
    ("Describe a classic novel.", Book),
    ("Write a short recipe for pancakes.", Recipe),
    ("What is the weather like in Oslo in winter?", Weather),
    ("Pick a paint color and an amount for a bedroom.", Paint),
    ("Plan how to learn to swim in three steps.", Plan),
    ("Review a pair of running shoes.", Review),
    ("Book a flight from Paris to New York.", Flight),
    ("Classify: 'I loved this movie, it was wonderful!'", Sentiment),
    ("Draw a triangle on a grid.", Shape),
    ("Form a team of two engineers.", Team),
    ("Describe a science fiction movie.", Movie),
    ("Count the chairs in a store's inventory.", Inventory),
    ("Schedule a team meeting.", Event),
    ("Describe the planet Saturn.", Planet),
    ("Recommend a famous song.", Song),
    ("Is the sky blue? Answer with a reason.", Answer),
    ("Describe the planet Mars.", Planet),
]


def parse_case(i):
    prompt, schema = CASES[i]
    r = client.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        response_format=schema,
        max_tokens=400,
        temperature=0.7,
        seed=i,
    )
    msg = r.choices[0].message
    ok = isinstance(msg.parsed, schema)
    return {"schema": schema.__name__, "valid": ok, "finish": r.choices[0].finish_reason,
            "text": msg.content}


out = {}
with ThreadPoolExecutor(max_workers=8) as pool:
    results = list(pool.map(parse_case, range(len(CASES))))
out["parse"] = results
out["parse_valid"] = sum(r["valid"] for r in results)

r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": 'Reply with a JSON object with the keys "fruit" and "color".'}],
    response_format={"type": "json_object"},
    max_tokens=200,
    temperature=0,
)
out["json_object_finish"] = r.choices[0].finish_reason
out["json_object"] = json.loads(r.choices[0].message.content)

text = ""
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Give a large city as JSON."}],
    response_format={"type": "json_schema",
                     "json_schema": {"name": "city", "schema": City.model_json_schema(), "strict": True}},
    max_tokens=200,
    temperature=0,
    stream=True,
)
for chunk in stream:
    for c in chunk.choices:
        if c.delta.content:
            text += c.delta.content
City.model_validate_json(text)
out["stream_city"] = json.loads(text)

r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of Italy?"}],
    max_tokens=8,
    temperature=0,
    logprobs=True,
    top_logprobs=3,
)
lp = r.choices[0].logprobs.content
out["chat_logprobs"] = [
    {"token": t.token, "logprob": t.logprob, "top": [[a.token, a.logprob] for a in t.top_logprobs]}
    for t in lp
]
out["chat_text"] = r.choices[0].message.content

for bad in [
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}}},
    {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
    {"type": "xml"},
]:
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       response_format=bad, max_tokens=4)
        out.setdefault("bad_schema", []).append(None)
    except openai.BadRequestError as e:
        out.setdefault("bad_schema", []).append(e.status_code)

print(json.dumps(out))
