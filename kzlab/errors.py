"""One exception hierarchy for everything kzlab refuses.

Every check that runs before ggml sees a tensor raises one of these, so that a bad file, bad codes or a
bad option never reaches a GGML_ASSERT (which would abort the process and, in Jupyter, kill the kernel).
"""

from __future__ import annotations


class KzlabError(Exception):
    """Base class: catching it catches every refusal kzlab makes."""


class InvalidModelError(KzlabError):
    """The decoder file (or directory) cannot be used: not GGUF, truncated, unknown layout, bad tensor."""


class LayoutError(InvalidModelError):
    """The tensor names of a file cannot be mapped to the decoder's roles (or the map is ambiguous)."""


class InvalidInputError(KzlabError, ValueError):
    """Codes, latents or audio given to the decoder are not what it accepts."""


class InvalidOptionError(KzlabError, ValueError):
    """An option (backend, lowering, threads, chunk size...) has a value kzlab does not accept."""


class BackendError(KzlabError):
    """A ggml backend could not be created or failed while computing (e.g. an RPC server went away)."""


class ResourceError(KzlabError):
    """The work would exceed a resource budget (memory), so it was refused before allocation."""


class Cancelled(KzlabError):
    """A computation was stopped on request (KeyboardInterrupt, the Cancel button)."""
