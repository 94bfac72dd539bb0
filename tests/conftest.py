"""Fixtures for the component tests."""

from __future__ import annotations

import pytest
from support import STACKS, rendered

from components.offline import render
@pytest.fixture(params=STACKS)
def any_stack(request) -> render.Rendered:
    return rendered(request.param)


@pytest.fixture
def p5() -> render.Rendered:
    return rendered("p5")


@pytest.fixture
def p4de() -> render.Rendered:
    return rendered("p4de")


@pytest.fixture
def dev() -> render.Rendered:
    return rendered("dev")
