"""What a run's tokens cost: USD per million input and output tokens per model (``runtime/pricing.yaml``).

The shipped file holds example prices (check your provider); ``--pricing FILE`` (``[stores] pricing``,
``DYNEVAL_PRICING``) replaces it, and a model spec's ``price_in`` / ``price_out`` override both for that spec.
A model is looked up by its label (``MODEL@BASE_URL``, ``local:NAME``, ``anthropic/NAME``), then by its bare name.
A model without a price has an unknown cost: :class:`runtime.events.Usage` counts such calls instead of adding 0.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dyneval.runtime.models import INTEGRATIONS, model_label
from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError
from dyneval.stores.inputs import TooDeep, parse_bounded

SHIPPED = Path(__file__).with_name("pricing.yaml")


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


class PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: dict[str, Price]


class Pricing(BaseModel):
    """Prices by model label or name."""

    prices: dict[str, Price] = Field(default_factory=dict)

    def price(self, label: str) -> Price | None:
        """The price of a logged model label (``None``: unknown): the label, the model's name without its base URL,
        then without its provider (``anthropic/claude-sonnet-4-0`` is ``claude-sonnet-4-0``)."""
        name = label.split("@", 1)[0]
        provider, _, bare = name.partition("/")
        found = self.prices.get(label) or self.prices.get(name)
        return found or (self.prices.get(bare) if provider in INTEGRATIONS else None)

    def cost(self, label: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """USD of one exchange (``None``: the model has no price)."""
        price = self.price(label)
        return None if price is None else price.cost(prompt_tokens, completion_tokens)

    @classmethod
    def for_run(cls, config: RunConfig) -> Pricing:
        """The run's pricing file (the shipped one by default) plus the prices set in its model specs."""
        prices = dict(read_prices(config.stores.pricing or str(SHIPPED)))
        for spec in config.models.values():
            if spec.price_in is not None and spec.price_out is not None:
                prices[model_label(spec)] = Price(input=spec.price_in, output=spec.price_out)
        return cls(prices=prices)


@lru_cache(maxsize=8)
def read_prices(path: str) -> dict[str, Price]:
    """A pricing file's prices; a missing or malformed file is an :class:`InputError` (exit 2)."""
    try:
        data = parse_bounded(yaml.safe_load, Path(path).read_text(encoding="utf-8"))
        return PriceFile.model_validate(data).models
    except TooDeep as exc:
        raise InputError(str(exc), file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read pricing file: {exc.strerror or exc}", file=path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", file=path) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "top level"
        raise InputError(
            f"{where}: {err['msg']} (a pricing file is models: {{NAME: {{input: USD, output: USD}}}}, "
            "per million tokens)",
            file=path,
        ) from None
