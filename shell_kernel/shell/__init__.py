"""Shell code that the kernel runs in (session.bash) and beside (the .sh files) the shell."""

from importlib import resources


def script(name: str) -> str:
    """The text of one of the shell files shipped in this package."""
    return resources.files(__name__).joinpath(name).read_text()
