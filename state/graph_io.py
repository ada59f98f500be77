"""What a protocol graph takes from a user and what it gives back: the base of every graph's input schema.

Each graph is built with ``input_schema`` (a :class:`GraphInput`: only what a user or the batch runner's plan
provides, typed and described, from which LangGraph Studio draws its input form) and ``output_schema`` (a
``TypedDict`` of the fields the unit's record is made of, which Studio's end-of-run panel and ``invoke`` return);
the state schema stays the run's whole state, kept in the thread. The input models reuse the records the data
layer makes of a user's files (``SeedQuestion``, ``BaseQuestion``, ``LabelledItem``), so an input has the fields and
types of a record the command line reads; ``nodes/entry.py`` checks every input against its graph's model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class GraphInput(BaseModel):
    """A graph's input. A field the model (or a record in it) does not have is refused, and the JSON schema says
    so (``additionalProperties: false``), so Studio's form offers no other field; a top-level key outside the schema
    never reaches the graph (LangGraph's start step keeps only the input schema's keys)."""

    model_config = ConfigDict(extra="forbid")
