"""Shell code that the kernel runs in (session.bash) and beside (the .sh files) the shell."""

from importlib import resources


def script(name: str) -> str:
    """The text of one of the shell files shipped in this package. A line
    "#include FILE" stands for FILE's text: helpers that several scripts
    share, each carrying its own copy (they run as `sh -c TEXT` on a host
    that has none of these files)."""
    text = resources.files(__name__).joinpath(name).read_text()
    return "".join(script(line.split()[1]) if line.startswith("#include ") else line
                   for line in text.splitlines(keepends=True))
