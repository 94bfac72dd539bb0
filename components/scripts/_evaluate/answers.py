"""The final answer of a completion, found the way RLinf's math reward finds it.

RLinf/RLinf v0.3 rlinf/algorithms/rewards/math/math_verifier/verify.py process_results calls
parser.py extract_answer(text, "math", use_last_number=False) on both the response and the
reference: the content of the last `boxed{...}` (braces balanced), else what follows "he answer
is" / "final answer is", else nothing (no last-number fallback). Re-expressed here for the
standard library. RLinf then compares with math_equal (numeric and sympy equality); this
evaluation compares the extracted answers exactly after a light normalization (`normalize`), so it
can only under-count: a lower bound on what RLinf's reward would call correct.
"""

from __future__ import annotations

import re
from typing import Optional


def extract(text: str) -> Optional[str]:
    if "boxed" in text:
        rest = text.split("boxed")[-1]
        if not rest:
            return None
        if rest[0] != "{":
            return rest.split("$")[0].strip() or None
        depth, out = 1, []
        for ch in rest[1:]:
            depth += (ch == "{") - (ch == "}")
            if depth == 0:
                return "".join(out).strip()
            out.append(ch)
        return None  # unbalanced: the completion was cut off inside the box
    for marker in ("he answer is", "final answer is"):
        if marker in text:
            return text.split(marker)[-1].strip() or None
    return None


def normalize(answer: str) -> str:
    """Whitespace, `$`, `\\left`/`\\right`, `\\!`, `\\dfrac`/`\\tfrac`, a trailing period and a
    `\\text{...}` wrapper removed; `x = 5` -> `5`."""
    a = answer.strip().strip("$").strip()
    a = re.sub(r"\\text\{([^}]*)\}", r"\1", a)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac")):
        a = a.replace(old, new)
    a = re.sub(r"^[a-zA-Z]\s*=\s*", "", a)
    a = re.sub(r"\s+", "", a).rstrip(".")
    return a


def correct(completion: str, expected: str) -> tuple[bool, Optional[str]]:
    """(the completion's answer equals the expected one, the answer extracted)."""
    got = extract(completion)
    want = extract(expected) or expected
    return (got is not None and normalize(got) == normalize(want)), got
