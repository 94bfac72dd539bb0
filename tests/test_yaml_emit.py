"""components/offline/yaml_emit.py answers exactly as PyYAML's Emitter.analyze_scalar and writes
exactly as its Emitter.write_literal: over every scalar the renders write, and over random strings of
the characters their rules single out."""

from __future__ import annotations

import random

import pytest
import yaml
from support import rendered

from components.offline import render, yaml_emit
from components.stack import stackfile

# Every character class the rules test: indicators, whitespace and breaks, printable ASCII, the
# Unicode ranges around the allow_unicode limits (U+FEFF, surrogates, U+10FFFF), document markers.
ALPHABET = list("#,[]{}&*!|>'\"%@`?:-. \t\r\n\0ab1") + ["\x85", "\u2028", "\u2029", "\x7f", "\xa0", "é",
                                                          "\ud7ff", "\ud800", "\ue000", "\ufeff", "\ufffd",
                                                          "\U00010000", "\U0010ffff", "---", "..."]


def fields(analysis) -> dict:
    return dict(vars(analysis))


def original(scalar: str, allow_unicode: bool):
    emitter = yaml.SafeDumper(None, allow_unicode=allow_unicode)
    return yaml.emitter.Emitter.analyze_scalar(emitter, scalar)


def scalars(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from scalars(k)
            yield from scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from scalars(v)
    elif isinstance(value, str):
        yield value


@pytest.mark.parametrize("stack", stackfile.stack_names())
def test_same_analysis_for_every_scalar_of_the_render(stack):
    found = set(scalars(rendered(stack).manifests))
    assert len(found) > 100
    for scalar in found:
        assert fields(yaml_emit.analyze(scalar, False)) == fields(original(scalar, False)), scalar[:200]


@pytest.mark.parametrize("allow_unicode", [False, True])
def test_same_analysis_for_random_strings(allow_unicode):
    rng = random.Random(23)
    for n in range(20000):
        scalar = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8 if n % 2 else 40)))
        assert fields(yaml_emit.analyze(scalar, allow_unicode)) == fields(original(scalar, allow_unicode)), \
            repr(scalar)


def literal(text: str, dumper, allow_unicode: bool = False) -> str:
    return yaml.dump({"k": [text]}, Dumper=dumper, default_style="|", width=100, explicit_start=True,
                     allow_unicode=allow_unicode)


def test_same_literal_blocks_for_every_multiline_scalar_of_the_render():
    found = {s for stack in stackfile.stack_names() for s in scalars(rendered(stack).manifests) if "\n" in s}
    assert len(found) > 10
    for text in found:
        assert literal(text, render._Dumper) == literal(text, _Plain), text[:200]


@pytest.mark.parametrize("allow_unicode", [False, True])
def test_same_literal_blocks_for_random_strings(allow_unicode):
    rng = random.Random(23)
    lines = ["", " ", "  x", "a b", "#c", "\t", "é", "\x85", "\u2028"]
    for _ in range(5000):
        text = "".join(rng.choice(lines) + rng.choice(["\n", "\n\n", "", "\u2029", "\r\n"])
                       for _ in range(rng.randint(0, 6)))
        assert literal(text, render._Dumper, allow_unicode) == literal(text, _Plain, allow_unicode), repr(text)


def test_the_render_dumper_uses_both():
    assert render._Dumper.analyze_scalar is not yaml.emitter.Emitter.analyze_scalar
    assert render._Dumper.write_literal is not yaml.emitter.Emitter.write_literal
    doc = {"a": "x: y", "b": "line\nnext\n", "c": " lead", "d": "#x", "e": "ünï"}
    assert render.manifests_yaml([doc]) == yaml.dump_all([doc], Dumper=_Plain, sort_keys=False,
                                                        default_flow_style=False, width=100, explicit_start=True)


class _Plain(yaml.SafeDumper):
    """The render's representer on PyYAML's own analysis."""


_Plain.add_representer(str, render._str)
