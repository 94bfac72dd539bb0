"""The base of every config model: frozen, camelCase aliases, unknown keys refused, and field
docstrings as descriptions (docs/configuration.md is generated from them).

In a module of its own so that a config section can live in a module beside the component it
feeds (components/stack/elastic.py, ...) and still be one of the stack's models, without an
import circle through config.py.

The descriptions are read by pydantic itself (`use_attribute_docstrings`). A reader of our own, one
parse of each file instead of pydantic's walk of the call stack, saved no measurable share of a
render: bench/render_bench.py, best of 3, CPU time, p5 1.76 s with it and 1.68 s without (byo 0.86
s / 0.88 s); interleaved, best of 7: p5 2.00 s / 1.97 s, dev 1.91 s / 1.96 s, byo 0.86 s / 0.98 s
(2026-12-04, 2 cores, Python 3.11.7, load 0.4 rising to 4): at most 12 % (byo) and within the noise,
below the 20 % that would pay for re-implementing part of pydantic (issue 48).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              use_attribute_docstrings=True)
