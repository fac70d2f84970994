"""Provider JSON sent back exactly as it was given.

The models of provider messages (every generated model that allows unknown
fields) check what they are given, but a model cannot say it the way it was
said: it drops ``null`` fields or adds absent ones, puts its declared fields
first, and knows nothing of how a number was written. toolwire keeps
messages byte for byte (a byte changed in an earlier turn breaks the
provider's prompt cache), so the client must send them as they came.

A model validated from a dict therefore keeps a copy of that dict and is
serialized as it, as long as the model still holds what the dict says (a
model changed since, or built from keyword arguments, is serialized from
its fields). Numbers whose spelling matters travel as ``decimal.Decimal``
(``json.loads(text, parse_float=Decimal)``): ``_wire.encode`` writes them
as they were read (``1.10`` stays ``1.10``).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, PrivateAttr, SerializerFunctionWrapHandler, model_serializer, model_validator


class Verbatim(BaseModel):
    """Base of the generated models of provider JSON."""

    _verbatim: Any = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_what_was_given(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, dict) and isinstance(model, Verbatim):
            # A copy: the caller may go on changing its dict.
            model._verbatim = copy.deepcopy(data)
        return model

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> Any:
        given = self._verbatim
        if given is not None and self._unchanged(given):
            return given
        return handler(self)

    def _unchanged(self, given: dict[str, Any]) -> bool:
        """Whether the model still holds what ``given`` says (no field set or changed since)."""
        again = type(self).model_validate(given)
        return again.__dict__ == self.__dict__ and again.__pydantic_extra__ == self.__pydantic_extra__
