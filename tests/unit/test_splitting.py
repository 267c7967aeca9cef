from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.splitting import _FENCE, fence_after, split_message, utf16_len


def fences_balanced(chunk: str) -> bool:
    fence = None
    for line in chunk.split("\n"):
        fence = fence_after(fence, line)
    return fence is None


def test_short_text_is_one_message() -> None:
    assert split_message("hello", 100) == ["hello"]
    assert split_message("", 100) == []


def test_splits_on_lines_and_keeps_indentation() -> None:
    text = "\n".join(f"    line {i} with indentation" for i in range(20))
    chunks = split_message(text, 120)
    assert all(len(c) <= 120 for c in chunks)
    assert "\n".join(chunks) == text
    assert all(line.startswith("    line") for c in chunks for line in c.split("\n"))


def test_code_fences_are_closed_and_reopened() -> None:
    code = "\n".join(f"  x = {i}  # keep indent" for i in range(30))
    text = f"Intro paragraph.\n\n```python\n{code}\n```\nAfter."
    chunks = split_message(text, 200)
    assert len(chunks) > 2
    for c in chunks:
        assert len(c) <= 200
        assert fences_balanced(c)
    assert chunks[1].startswith("```python\n")
    body = [line for c in chunks for line in c.split("\n") if line.startswith("  x = ")]
    assert body == code.split("\n")


def test_long_line_is_cut_at_spaces() -> None:
    text = " ".join(["word"] * 200)
    chunks = split_message(text, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(chunks) == text
    assert all(c.endswith(" ") or c == chunks[-1] for c in chunks)


def test_telegram_counts_utf16_units() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units, 3000 code points
    chunks = split_message(text, 4096, utf16_len)
    assert len(chunks) == 2
    assert all(utf16_len(c) <= 4096 for c in chunks)
    assert "".join(chunks) == text


def test_inline_triple_backticks_are_not_fences() -> None:
    assert fence_after(None, "```inline``` text") is None
    assert fence_after(None, "~~~") == ("~~~", "")
    assert fence_after(("```", "py"), "```") is None
    assert fence_after(("````", ""), "```") == ("````", "")


lines = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=120),
    st.sampled_from(["```", "```python", "~~~", "    indented code", "", "😀😀 emoji"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(lines, max_size=60), st.integers(min_value=32, max_value=300), st.booleans())
def test_properties(parts: list[str], limit: int, use_utf16: bool) -> None:
    length = utf16_len if use_utf16 else len
    text = "\n".join(parts)
    chunks = split_message(text, limit, length)
    for c in chunks:
        assert length(c) <= limit
        assert c.strip()
        if fences_balanced(text):
            assert fences_balanced(c)
    # Nothing is lost or invented, apart from whitespace-only pieces and fence lines added at splits.
    assert _content(chunks) == _content([text])


def _content(chunks: list[str]) -> str:
    kept = [line for c in chunks for line in c.split("\n") if not _FENCE.match(line)]
    return "".join("".join(kept).split())
