"""history_request answered from the shell's own history list, on both backends."""

import re


def history(kernel, access, **content):
    reply = kernel.request("history", hist_access_type=access, **content)["content"]
    assert reply["status"] == "ok"
    return reply["history"]


def numbers(listing: str) -> dict:
    """First line of each entry of the shell's `history` -> its number."""
    found = {}
    for line in listing.splitlines():
        match = re.match(r"\s*(\d+)[ *] (.*)", line)
        if match:
            found[match.group(2)] = int(match.group(1))
    return found


def test_tail_range_and_search(kernel):
    kernel.ok("history -c")
    kernel.ok("echo one")
    kernel.ok("echo two\n  echo two-b")
    kernel.ok("echo one")
    listed = numbers(kernel.ok("history"))  # the shell's own numbering
    first = listed["history -c"]

    tail = history(kernel, "tail", n=3, output=False, raw=True)
    assert [entry[2] for entry in tail] == ["echo two\n  echo two-b", "echo one", "history"]
    assert [entry[1] for entry in tail] == [first + 2, first + 3, first + 4]
    assert listed["echo two"] == first + 2
    session = tail[0][0]
    assert session >= 1 and all(entry[0] == session for entry in tail)

    everything = history(kernel, "range", session=0, start=1, stop=1000000, output=False, raw=True)
    assert [entry[2] for entry in everything] == [
        "history -c", "echo one", "echo two\n  echo two-b", "echo one", "history"]
    assert history(kernel, "range", session=session, start=first + 1, stop=first + 3,
                   output=False, raw=True) == [[session, first + 1, "echo one"],
                                               [session, first + 2, "echo two\n  echo two-b"]]
    last_two = history(kernel, "range", session=0, start=-2, output=False, raw=True)
    assert [entry[2] for entry in last_two] == ["echo one", "history"]
    assert history(kernel, "range", session=-1, start=1, output=False, raw=True) == []

    found = history(kernel, "search", pattern="echo one", output=False, raw=True)
    assert [entry[1] for entry in found] == [first + 1, first + 3]
    found = history(kernel, "search", pattern="echo one", unique=True, output=False, raw=True)
    assert [entry[1] for entry in found] == [first + 3]
    found = history(kernel, "search", pattern="echo t*", output=False, raw=True)
    assert [entry[2] for entry in found] == ["echo two\n  echo two-b"]
    found = history(kernel, "search", pattern="echo*", n=1, output=False, raw=True)
    assert [entry[1] for entry in found] == [first + 3]

    with_output = history(kernel, "tail", n=1, output=True, raw=True)
    assert with_output == [[session, first + 4, ["history", None]]]


def test_history_is_the_shells_own(kernel):
    """What the cells do to the list (history -d, history -s) is what the
    kernel answers, and a cell's state is untouched by the request."""
    kernel.ok("history -c; history -s 'pushed by hand'")
    kernel.run("(exit 4)")
    assert [entry[2] for entry in history(kernel, "tail", n=10, output=False, raw=True)] == [
        "pushed by hand", "history -c; history -s 'pushed by hand'", "(exit 4)"]
    assert kernel.run("echo $?").stdout == "4\n"
