"""The refusals that docs/migrating.md quotes are the ones the code prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import hpcgpu

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
# ```text blocks: a ">>> call" line, then "ValueError: message" over the following lines
QUOTE = re.compile(r"```text\n\s*>>> (?P<call>.+)\n\s*ValueError: (?P<message>(?:.+\n)+?)\s*```")


def quotes() -> list[tuple[str, str]]:
    found = [(m["call"], " ".join(m["message"].split())) for m in QUOTE.finditer(DOC.read_text())]
    assert found, "docs/migrating.md quotes no refusal: update this test"
    return found


@pytest.mark.parametrize("call,message", quotes())
def test_the_quoted_refusal_is_what_the_code_says(call, message):
    names = {name: getattr(hpcgpu, name) for name in hpcgpu.__all__ if name[0].isupper()}
    with pytest.raises(ValueError) as caught:
        eval(call, names)  # the doc's own line
    assert " ".join(str(caught.value).split()) == message
