"""A model's own field by name, for code that reads a field's default, label or choices."""

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models


def model_field(model: type[models.Model], name: str) -> "models.Field[Any, Any]":
    """`model`'s field (a column or a forward relation) named `name`. FieldDoesNotExist for an
    unknown name and for a reverse relation, which has no default, label or choices of its own."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):
        raise FieldDoesNotExist(f"{model.__name__}.{name} is a reverse relation, not a field")
    return field
