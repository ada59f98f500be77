"""Integration: the embedded SmolLM2 model behind llama.cpp's real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from dyneval.runtime.events import EventLog
from dyneval.runtime.services import Services
from dyneval.state.config import RunConfig

pytestmark = pytest.mark.integration


class CityAnswer(BaseModel):
    city: str = Field(description="name of the city")
    sure: Literal["yes", "no"] = Field(description="are you sure")


def test_role_on_embedded_server_returns_schema_valid_structured_answer(embedded_url, tmp_path):
    config = RunConfig(protocol="test", roles={"target": "local", "evaluator": "local"})
    services = Services(config=config, run_dir=tmp_path, events=EventLog(tmp_path / "events.jsonl"))
    llm = services.llm("target")
    assert llm.chat.openai_api_base == embedded_url
    answer = llm.structured(
        CityAnswer,
        [("human", "What is the capital of France? Give the city and whether you are sure.")],
        step="capital",
    )
    assert isinstance(answer, CityAnswer) and answer.city.strip()
    text = services.llm("evaluator").text([("human", "Say hello.")], step="hello")
    assert text.strip()
    usage = services.events.usage("-")
    assert usage.calls >= 2 and usage.prompt_tokens > 0 and usage.completion_tokens > 0
