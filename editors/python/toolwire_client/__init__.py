"""A typed Python client for toolwire, for agent harnesses.

``ToolwireClient`` (blocking) and ``AsyncToolwireClient`` (asyncio) start the
workspace's shared daemon (``toolwire serve --shared``), a private server or
a given command, and call every method of the method table with the
pydantic models of ``toolwire_client.models``, generated from toolwire's
published JSON Schema.
"""

from ._cancel import CancelToken
from ._methods import METHOD_NAMES, PROGRESS_METHODS
from ._wire import CLIENT_VERSION
from .aio import AsyncToolwireClient
from .client import ToolwireClient
from .errors import (
    ERROR_CLASSES,
    ArtifactNotFoundError,
    CancelledError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    NotInitializedError,
    ParseError,
    SessionExistsError,
    SessionNotFoundError,
    StorageError,
    ToolwireError,
    ToolwireExitedError,
    TranscriptLockedError,
    UnknownToolResultError,
)
from .locate import ToolwireNotFoundError, locate_toolwire

__version__ = CLIENT_VERSION
__all__ = [
    "CLIENT_VERSION",
    "ERROR_CLASSES",
    "METHOD_NAMES",
    "PROGRESS_METHODS",
    "ArtifactNotFoundError",
    "AsyncToolwireClient",
    "CancelToken",
    "CancelledError",
    "InvalidParamsError",
    "InvalidRequestError",
    "MethodNotFoundError",
    "NotInitializedError",
    "ParseError",
    "SessionExistsError",
    "SessionNotFoundError",
    "StorageError",
    "ToolwireClient",
    "ToolwireError",
    "ToolwireExitedError",
    "ToolwireNotFoundError",
    "TranscriptLockedError",
    "UnknownToolResultError",
    "locate_toolwire",
]
