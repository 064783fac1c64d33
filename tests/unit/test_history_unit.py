"""history.py: the shell's `history` listing parsed, and requests answered."""

from shell_kernel import history


def test_entries_split_only_where_the_next_number_starts():
    listing = ("    7  \x1eecho a\n    8* \x1eprintf x\n    9  \x1e\n"
               "   12  \x1enot an entry\n   10  ??read from a file\n")
    assert history.parse(listing) == [
        (7, "echo a"), (8, "printf x"), (9, "\n   12  \x1enot an entry"), (10, "read from a file")]
    assert history.parse("") == []


def test_requests():
    entries = [(3, "a"), (4, "b\nc"), (5, "a"), (6, "d")]
    one = history.SESSION
    assert history.answer(entries, "tail", n=2) == [(one, 5, "a"), (one, 6, "d")]
    assert history.answer(entries, "tail", n=1, output=True) == [(one, 6, ("d", None))]
    assert history.answer(entries, "range", session=0, start=4, stop=6) == [
        (one, 4, "b\nc"), (one, 5, "a")]
    assert [e[1] for e in history.answer(entries, "range", session=one, start=-1)] == [6]
    assert history.answer(entries, "range", session=-1, start=1) == []
    assert [e[1] for e in history.answer(entries, "search", pattern="a")] == [3, 5]
    assert [e[1] for e in history.answer(entries, "search", pattern="a", unique=True)] == [5]
    assert [e[1] for e in history.answer(entries, "search", pattern="*c")] == [4]
    assert [e[1] for e in history.answer(entries, "search", pattern="*", n=2)] == [5, 6]
    assert history.answer(entries, "nonsense") == []
