"""Typed items: a record kind's attributes are declared once, as the fields of a frozen dataclass.

`Record.from_item` builds a record from a stored item (each attribute checked against its field's type, an
absent optional attribute its default, a missing required one or a value outside its ``Literal`` a
`BadItem`); `Record.item` is what a new record writes (None, and an `optional` field's default, left
out); `Record.assign` builds an update's SET assignments from field names, refusing a name the record does
not declare. So a new attribute is one new field, and a typo in an update is an error, not a new attribute.
Attributes a record does not declare are kept in ``extra`` (read, never written back by `item`). A field may be
stored under another name or in another form (`stored`: a turn's ``message`` is ``message_text``, its answer
compressed JSON), declared beside the field, so reading and writing cannot disagree.

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
ATTRIBUTE = "attribute"  # field metadata: the stored attribute's name, when not the field's
CODEC = "codec"  # field metadata: how the value is stored, when not as itself


class BadItem(ValueError):
    """A stored item that is not a record of its kind (a required attribute missing, a value of the wrong type)."""


@dataclasses.dataclass(frozen=True)
class Codec:
    """How a field's value is stored when not as itself: JSON in a string, compressed JSON in a binary."""

    decode: Callable[[Any], Any]
    encode: Callable[[Any], Any]


def stored(
    attribute: str | None = None,
    *,
    codec: Codec | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A field stored under ``attribute`` (when not its own name) and/or through ``codec``."""
    metadata = {ATTRIBUTE: attribute, CODEC: codec}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


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
    attribute: str  # the stored attribute's name
    decode: Callable[[Any], Any]  # the codec's (identity when none), then the type's coercion
    encode: Callable[[Any], Any] | None
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
            if item.get(f.attribute) is None:
                if f.default is not dataclasses.MISSING:
                    continue  # the field's default
                if not f.nullable:
                    raise BadItem(f"{cls.KIND}: {f.name} is missing")
                values[f.name] = None
                continue
            try:
                values[f.name] = f.decode(item[f.attribute])
            except (TypeError, ValueError) as exc:
                raise BadItem(f"{cls.KIND}: {f.name}: {exc}") from None
        known = _attributes(cls)
        return cls(**values, extra={k: v for k, v in item.items() if k not in known})

    def item(self) -> dict[str, Any]:
        """The declared attributes to write, absent ones left out (``extra`` is not written back)."""
        out = {}
        for f in _fields(type(self)):
            value = getattr(self, f.name)
            if value is None or (f.unstored and value == f.default):
                continue
            out[f.attribute] = f.encode(value) if f.encode else value
        return out

    @classmethod
    def names(cls) -> frozenset[str]:
        return _names(cls)

    @classmethod
    def projection(cls, *fields: str) -> tuple[str, dict[str, str]]:
        """A ProjectionExpression of ``fields``' stored attributes and its names (``#p<i>``: reserved words
        such as ``status`` need them); a name the record does not declare is a ValueError."""
        cls.check_fields(fields)
        by_name = {f.name: f.attribute for f in _fields(cls)}
        names = {f"#p{i}": by_name[name] for i, name in enumerate(fields)}
        return ", ".join(names), names

    @classmethod
    def assign(cls, values: Mapping[str, Any], prefix: str = "f") -> tuple[list[str], dict[str, str], dict[str, Any]]:
        """SET assignments of declared fields (``#<prefix>i = :<prefix>i``, the field's stored name and value);
        a name the record does not declare is a ValueError (a typo would otherwise add an attribute)."""
        cls.check_fields(values)
        by_name = {f.name: f for f in _fields(cls)}
        assignments, names, out = [], {}, {}
        for i, (name, value) in enumerate(values.items()):
            f = by_name[name]
            names[f"#{prefix}{i}"] = f.attribute
            out[f":{prefix}{i}"] = f.encode(value) if f.encode and value is not None else value
            assignments.append(f"#{prefix}{i} = :{prefix}{i}")
        return assignments, names, out

    @classmethod
    def check_fields(cls, names: Iterable[str]) -> None:
        """ValueError unless every name is a declared field."""
        unknown = set(names) - _names(cls)
        if unknown:
            raise ValueError(f"{cls.KIND} has no field {sorted(unknown)}")

    @classmethod
    def check(cls, attributes: Iterable[str]) -> None:
        """ValueError unless every name is a declared field's stored attribute (what an expression names by hand)."""
        unknown = set(attributes) - _attributes(cls)
        if unknown:
            raise ValueError(f"{cls.KIND} has no attribute {sorted(unknown)}")


_FIELDS: dict[type, tuple[_Field, ...]] = {}
_NAMES: dict[type, frozenset[str]] = {}
_ATTRIBUTES: dict[type, frozenset[str]] = {}


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
        coerce = _coercer(kind)
        codec: Codec | None = f.metadata.get(CODEC)
        decode = coerce if codec is None else _then(codec.decode, coerce)
        attribute = f.metadata.get(ATTRIBUTE) or f.name
        encode = codec.encode if codec else None
        out.append(_Field(f.name, attribute, decode, encode, default, nullable, bool(f.metadata.get(UNSTORED))))
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def _then(first: Callable[[Any], Any], second: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: second(first(v))


def _names(cls: type[Record]) -> frozenset[str]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = frozenset(f.name for f in _fields(cls))
    return names


def _attributes(cls: type[Record]) -> frozenset[str]:
    names = _ATTRIBUTES.get(cls)
    if names is None:
        names = _ATTRIBUTES[cls] = frozenset(f.attribute for f in _fields(cls))
    return names
