"""Finding the program in a response."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from areal_code.extract import extract_code, find_blocks
from areal_core.errors import ConfigError

CODE_LINE = st.text(st.characters(blacklist_characters="`~\r\n", blacklist_categories=("Cs",)), max_size=40)
PROSE = st.text(st.characters(blacklist_characters="`~", blacklist_categories=("Cs",)), max_size=80)


@given(st.lists(CODE_LINE, min_size=1, max_size=8), PROSE, PROSE)
def test_a_python_block_is_extracted_verbatim_from_prose(lines, before, after):
    code = "\n".join(lines) + "\n"
    response = f"{before}\n```python\n{code}```\n{after}"
    assert extract_code(response) == (code, "block")


@given(st.lists(st.lists(CODE_LINE, min_size=1, max_size=4), min_size=2, max_size=5))
def test_the_last_python_block_wins_by_default(blocks):
    codes = ["\n".join(lines) + "\n" for lines in blocks]
    response = "".join(f"Attempt {i}:\n```python\n{code}```\n" for i, code in enumerate(codes))
    assert extract_code(response)[0] == codes[-1]
    assert extract_code(response, block="first")[0] == codes[0]
    assert extract_code(response, block="longest")[0] == max(codes, key=len)


def test_blocks_of_other_languages_are_ignored():
    response = "```python\nprint(1)\n```\nand in C++:\n```cpp\nint main(){}\n```\n"
    assert extract_code(response) == ("print(1)\n", "block")
    assert extract_code(response, language="cpp") == ("int main(){}\n", "block")
    assert extract_code("```cpp\nint main(){}\n```") == ("", "none")


def test_language_tags_are_case_insensitive_and_aliased():
    for tag in ("Python", "py", "PYTHON3", "python title='x'"):
        assert extract_code(f"```{tag}\nx = 1\n```") == ("x = 1\n", "block")


def test_untagged_blocks_are_used_when_no_block_names_the_language():
    assert extract_code("```\nx = 1\n```") == ("x = 1\n", "untagged block")
    assert extract_code("```\nnot this\n```\n```python\nx = 2\n```")[0] == "x = 2\n"


def test_tilde_fences_and_longer_fences_close_correctly():
    response = "~~~python\na = '```'\n~~~\n````python\nb = 1\n```\nc = 2\n````\n"
    assert [b.code for b in find_blocks(response)] == ["a = '```'\n", "b = 1\n```\nc = 2\n"]


def test_an_unterminated_last_block_runs_to_the_end():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n") == ("def f():\n    return 1\n", "block")


def test_a_response_without_fences_is_the_program_unless_told_otherwise():
    completion = "    return sorted(x)\n"
    assert extract_code(completion) == (completion, "raw")
    assert extract_code(completion, no_block="empty") == ("", "none")
    assert extract_code("   \n") == ("", "none")


def test_bad_options_are_named():
    with pytest.raises(ConfigError, match="block='middle'"):
        extract_code("x", block="middle")
    with pytest.raises(ConfigError, match="no_block='guess'"):
        extract_code("x", no_block="guess")
