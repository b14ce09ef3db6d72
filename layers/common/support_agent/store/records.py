"""Typed items: a record kind's attributes are declared once, as the fields of a frozen dataclass.

`Record.from_item` builds a record from a stored item (each attribute checked against its field's type, an
absent optional attribute its default, a missing required one or a value outside its ``Literal`` a
`BadItem`); `Record.item` is what a new record writes (None, and an `optional` field's default, left
out); `Record.assign` builds an update's SET assignments from field names, refusing a name the record does
not declare. So a new attribute is one new field, and a typo in an update is an error, not a new attribute.
Attributes a record does not declare are kept in ``extra`` (read, never written back by `item`).

Plain dataclasses, not pydantic models: a turn or a ledger row is read on the chat's and the payments'
paths, where building a model class costs every cold start (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, Self, Union, get_args, get_origin

UNSTORED = "unstored"  # field metadata: the field's default means absent (never written; absent reads as it)


class BadItem(ValueError):
    """A stored item that is not a record of its kind (a required attribute missing, a value of the wrong type)."""


def optional(default: Any = "") -> Any:
    """A field whose ``default`` is not stored: a direct refund's empty approval id, a count still 0."""
    return dataclasses.field(default=default, metadata={UNSTORED: True})


def _coercer(kind: Any) -> Callable[[Any], Any]:
    """How one attribute's stored value becomes the field's: numbers are ``int`` (we store only integers)."""
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(kind) if a is not type(None)]
        inner = _coercer(args[0]) if len(args) == 1 else (lambda v: v)
        return lambda v: None if v is None else inner(v)
    if origin is Literal:
        allowed = get_args(kind)

        def literal(v: Any) -> Any:
            if v not in allowed:
                raise BadItem(f"{v!r} is not one of {allowed}")
            return v

        return literal
    if kind is int:
        return int
    if kind is str:
        return str
    if kind is bool:
        return bool
    return lambda v: v


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    coerce: Callable[[Any], Any]
    default: Any  # dataclasses.MISSING: required (absent reads as None when the type allows None)
    nullable: bool
    unstored: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """The base of every record kind: keyword-only frozen dataclasses (``extra``: undeclared attributes)."""

    extra: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    KIND: ClassVar[str] = "record"  # for errors: "approval", "hand-off", ...

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Self:
        """The record a stored item (``dynamo.from_item``'s plain values) holds; `BadItem` when it holds none."""
        values: dict[str, Any] = {}
        for f in _fields(cls):
            if item.get(f.name) is None:
                if f.default is not dataclasses.MISSING:
                    continue  # the field's default
                if not f.nullable:
                    raise BadItem(f"{cls.KIND}: {f.name} is missing")
                values[f.name] = None
                continue
            try:
                values[f.name] = f.coerce(item[f.name])
            except (TypeError, ValueError) as exc:
                raise BadItem(f"{cls.KIND}: {f.name}: {exc}") from None
        known = _names(cls)
        return cls(**values, extra={k: v for k, v in item.items() if k not in known})

    def item(self) -> dict[str, Any]:
        """The declared attributes to write, absent ones left out (``extra`` is not written back)."""
        unstored = _unstored(type(self))
        return {
            k: v
            for k, v in self.__dict__.items()
            if v is not None and k != "extra" and not (k in unstored and v == unstored[k])
        }

    @classmethod
    def names(cls) -> frozenset[str]:
        return _names(cls)

    @classmethod
    def assign(cls, values: Mapping[str, Any], prefix: str = "f") -> tuple[list[str], dict[str, str], dict[str, Any]]:
        """SET assignments of declared fields (``#<prefix>i = :<prefix>i``), their names and their values; a
        name the record does not declare is a ValueError (a typo would otherwise add an attribute)."""
        unknown = set(values) - _names(cls)
        if unknown:
            raise ValueError(f"{cls.KIND} has no field {sorted(unknown)}")
        assignments, names, out = [], {}, {}
        for i, (name, value) in enumerate(values.items()):
            names[f"#{prefix}{i}"] = name
            out[f":{prefix}{i}"] = value
            assignments.append(f"#{prefix}{i} = :{prefix}{i}")
        return assignments, names, out

    @classmethod
    def check(cls, names: Iterable[str]) -> None:
        """ValueError unless every name is a declared field (attributes an expression names by hand)."""
        unknown = set(names) - _names(cls)
        if unknown:
            raise ValueError(f"{cls.KIND} has no field {sorted(unknown)}")


_FIELDS: dict[type, tuple[_Field, ...]] = {}
_NAMES: dict[type, frozenset[str]] = {}
_UNSTORED: dict[type, dict[str, Any]] = {}


def _fields(cls: type[Record]) -> tuple[_Field, ...]:
    """The class's fields and their converters, worked out on first use (not at import: cold starts)."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "extra":
            continue
        default: Any = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory
        kind = hints[f.name]
        nullable = get_origin(kind) in (Union, types.UnionType) and type(None) in get_args(kind)
        out.append(_Field(f.name, _coercer(kind), default, nullable, bool(f.metadata.get(UNSTORED))))
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def _unstored(cls: type[Record]) -> dict[str, Any]:
    """An `optional` field's name and the default it does not store."""
    known = _UNSTORED.get(cls)
    if known is None:
        known = _UNSTORED[cls] = {f.name: f.default for f in _fields(cls) if f.unstored}
    return known


def _names(cls: type[Record]) -> frozenset[str]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = frozenset(f.name for f in _fields(cls))
    return names
