"""The ASGI application as a daphne process serves it (`daphne console.serving:application`).

The same application as console.asgi, with the garbage collector set for short pauses once
everything is imported (console.collector). Only server processes should run that: tests and
tools that import console.asgi keep Python's defaults, so a test process does not freeze its
fixtures or log the long collections of a heap that no server would have.
"""

from console.asgi import application
from console.collector import prepare_for_serving

prepare_for_serving()

__all__ = ["application"]
