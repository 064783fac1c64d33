"""shell_kernel: a Jupyter kernel whose cells run in one persistent bash."""

__version__ = "0.1.0"
