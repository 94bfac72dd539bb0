"""Two steps of PyYAML's emitter, the same output with regular expressions instead of a Python loop
over every character: the scalar analysis and the literal block writer.

The emitter analyses every scalar it writes to choose its style (plain, quoted, literal block), and
writes a literal block (`|`) character by character: in PyYAML 6.0.3 (yaml/emitter.py,
Emitter.analyze_scalar and Emitter.write_literal) a loop of Python statements per character, which
for the scripts and dashboards in the rendered ConfigMaps (about 200 KB a stack) was the largest
cost of writing manifests.yaml. `analyze` returns the same ScalarAnalysis for every string and
`write_literal` makes the same calls on the emitter, line by line instead of character by
character: tests/test_yaml_emit.py compares them with PyYAML's over every scalar of every stack's
render and over random strings built from the characters the rules single out. The render's
dumper uses both (render._Dumper); the YAML it writes is byte-identical.
"""

from __future__ import annotations

import re

from yaml.emitter import Emitter, ScalarAnalysis

# The rules' character classes (Emitter.analyze_scalar): line breaks, and what counts as whitespace
# before or after an indicator.
_BREAKS = "\n\x85\u2028\u2029"
_WHITESPACE = "\0 \t\r\n\x85\u2028\u2029"
_W = "[\0 \t\r\n\x85\u2028\u2029]"

_LEADING_INDICATOR = "#,[]{}&*!|>'\"%@`"
# After the first character: these are flow indicators anywhere.
_FLOW_INSIDE = re.compile(r"[,?\[\]{}:]")
# `: ` (or `:` at the end) is a block indicator too; so is ` #`.
_COLON_SPACE = re.compile(":(?=" + _W + r"|\Z)")
_SPACE_HASH = re.compile("(?<=" + _W + ")#")
_LINE_BREAK = re.compile("[\n\x85\u2028\u2029]")
_BREAK_SPACE = re.compile("[\n\x85\u2028\u2029] ")
_SPACE_BREAK = re.compile(" [\n\x85\u2028\u2029]")
# Characters outside printable ASCII and the line feed; with allow_unicode, outside the printable
# Unicode ranges the emitter may write as they are (U+FEFF and U+10FFFF excluded, as there).
_SPECIAL_ASCII = re.compile("[^\n\x20-\x7e]")
_SPECIAL_UNICODE = re.compile("[^\n\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010fffe]")


def analyze(scalar: str, allow_unicode: bool) -> ScalarAnalysis:
    """Emitter.analyze_scalar(scalar) of an emitter whose allow_unicode is `allow_unicode`."""
    if not scalar:
        return ScalarAnalysis(scalar=scalar, empty=True, multiline=False,
                              allow_flow_plain=False, allow_block_plain=True,
                              allow_single_quoted=True, allow_double_quoted=True,
                              allow_block=False)
    block_indicators = flow_indicators = scalar.startswith(("---", "..."))
    first = scalar[0]
    followed_by_whitespace = len(scalar) == 1 or scalar[1] in _WHITESPACE
    if first in _LEADING_INDICATOR:
        flow_indicators = block_indicators = True
    if first in "?:":
        flow_indicators = True
        if followed_by_whitespace:
            block_indicators = True
    if first == "-" and followed_by_whitespace:
        flow_indicators = block_indicators = True
    if _FLOW_INSIDE.search(scalar, 1):
        flow_indicators = True
    if _COLON_SPACE.search(scalar, 1) or _SPACE_HASH.search(scalar, 1):
        flow_indicators = block_indicators = True
    line_breaks = _LINE_BREAK.search(scalar) is not None
    special_characters = (_SPECIAL_UNICODE if allow_unicode else _SPECIAL_ASCII).search(scalar) is not None
    leading_space, trailing_space = first == " ", scalar[-1] == " "
    leading_break, trailing_break = first in _BREAKS, scalar[-1] in _BREAKS
    break_space = _BREAK_SPACE.search(scalar) is not None
    space_break = _SPACE_BREAK.search(scalar) is not None

    # From here on the decisions of Emitter.analyze_scalar, in its order.
    allow_flow_plain = allow_block_plain = allow_single_quoted = allow_double_quoted = allow_block = True
    if leading_space or leading_break or trailing_space or trailing_break:
        allow_flow_plain = allow_block_plain = False
    if trailing_space:
        allow_block = False
    if break_space:
        allow_flow_plain = allow_block_plain = allow_single_quoted = False
    if space_break or special_characters:
        allow_flow_plain = allow_block_plain = allow_single_quoted = allow_block = False
    if line_breaks:
        allow_flow_plain = allow_block_plain = False
    if flow_indicators:
        allow_flow_plain = False
    if block_indicators:
        allow_block_plain = False
    return ScalarAnalysis(scalar=scalar, empty=False, multiline=line_breaks,
                          allow_flow_plain=allow_flow_plain, allow_block_plain=allow_block_plain,
                          allow_single_quoted=allow_single_quoted, allow_double_quoted=allow_double_quoted,
                          allow_block=allow_block)


_RUN = re.compile("[\n\x85\u2028\u2029]+|[^\n\x85\u2028\u2029]+")


def write_literal(emitter: Emitter, text: str) -> None:
    """Emitter.write_literal(text): the header, then each run of line breaks written break by break
    and each line indented and written whole, in the calls and order of PyYAML's loop."""
    hints = emitter.determine_block_hints(text)
    emitter.write_indicator("|" + hints, True)
    if hints[-1:] == "+":
        emitter.open_ended = True
    emitter.write_line_break()
    breaks = ""  # the run of line breaks not written yet
    line = False  # the last run was a line (else breaks, or nothing yet)
    for run in _RUN.findall(text):
        if run[0] in _BREAKS:
            breaks, line = run, False
            continue
        for br in breaks:
            if br == "\n":
                emitter.write_line_break()
            else:
                emitter.write_line_break(br)
        emitter.write_indent()
        emitter.stream.write(run.encode(emitter.encoding) if emitter.encoding else run)
        breaks, line = "", True
    if line:
        emitter.write_line_break()
    else:
        for br in breaks:
            if br == "\n":
                emitter.write_line_break()
            else:
                emitter.write_line_break(br)
