"""JSON Schemas from Python type hints, for host tools (docs/reference/python/tools.md "Tool schemas").

``args_schema(fn)`` describes the keyword arguments a tool function takes; the engine checks a
call's args against it before the call (kind ``invalid_input``, docs/reference/c-abi/engine.md
"dccflow_tool_register"). Only hints that map to JSON are turned into rules; any other hint (a
class, ``Path``, a ``TypeVar``, a string that does not resolve) accepts any value, so a schema
never refuses what the function would take.

=====================================  ===========================================
hint                                   schema
=====================================  ===========================================
``int``                                ``{"type": "integer"}``
``float``                              ``{"type": "number"}`` (integers included)
``str`` / ``bool`` / ``None``          ``string`` / ``boolean`` / ``null``
``list``, ``List[X]``, ``Sequence[X]``  ``{"type": "array", "items": X}``
``tuple``, ``Tuple[X, ...]``           the same
``dict``, ``Dict[str, X]``             ``{"type": "object", "additionalProperties": X}``
``Optional[X]``, ``Union[X, Y]``       ``X`` or ``Y`` (``anyOf``, or a list of types)
``Literal["a", "b"]``, an ``Enum``     ``{"enum": [...]}``
a subclass of one of these classes     that class's type (``class Shot(str)``: string)
``Any``, no hint, anything else        ``{}`` (any value)
=====================================  ===========================================

A parameter without a default is ``required``; one whose default is ``None`` also accepts
``null``; without ``**kwargs`` no other argument is allowed (``additionalProperties: false``).
Works on Python 3.7+ (``typing`` internals read with ``__origin__``/``__args__``, no
``typing.get_origin``).
"""

import collections.abc
import enum
import inspect
import typing
from typing import Any, Callable, Dict, List, Mapping, Optional, Union, cast

__all__ = ["args_schema", "output_schema", "hint_schema", "tool_schema", "SchemaOption"]

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_NAMED = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "dict": "object", "list": "array"}
_ARRAYS = (list, tuple, set, frozenset)
_SEQUENCE_ORIGINS = {"Sequence", "MutableSequence", "Iterable", "Collection", "AbstractSet", "Set",
                     "FrozenSet", "MutableSet"}
_MAPPING_ORIGINS = {"Mapping", "MutableMapping"}


def _hints(fn: Callable[..., Any]) -> Dict[str, Any]:
    """fn's annotations, forward references resolved when they can be (else left as text)."""
    try:
        return dict(typing.get_type_hints(fn))
    except Exception:  # noqa: BLE001 - NameError for an unresolvable forward reference, and others
        return dict(getattr(fn, "__annotations__", None) or {})


def _origin_name(origin: Any) -> str:
    return str(getattr(origin, "__name__", "") or getattr(origin, "_name", "") or "")


def _merge_union(members: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One schema accepting what any member accepts. The members hint_schema makes carry
    keywords that apply to one JSON type only (items to arrays, additionalProperties to
    objects), so members of distinct types merge into one schema with a list of types:
    Optional[List[str]] is {"type": ["array", "null"], "items": {"type": "string"}}."""
    flat: List[Dict[str, Any]] = []
    for m in members:
        flat.extend(m["anyOf"] if list(m) == ["anyOf"] else [m])
    if any(m == {} for m in flat):
        return {}
    if all("enum" in m or m == {"type": "null"} for m in flat):  # Literal/Enum, maybe Optional
        values: List[Any] = []
        for m in flat:
            for v in m.get("enum", [None]):
                if v not in values:
                    values.append(v)
        return {"enum": values}
    merged: Dict[str, Any] = {}
    types: List[str] = []
    for m in flat:
        if "type" not in m:
            return {"anyOf": flat}
        for t in m["type"] if isinstance(m["type"], list) else [m["type"]]:
            if t in types:
                if m != {"type": t}:  # the same type twice with its own rules: keep both
                    return {"anyOf": flat}
                continue
            types.append(t)
        for k, v in m.items():
            if k != "type":
                if k in merged:
                    return {"anyOf": flat}
                merged[k] = v
    if "integer" in types and "number" in types:
        types.remove("integer")
    out: Dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
    out.update(merged)
    return out


def _enum_values(values: Any) -> Optional[List[Any]]:
    out = []
    for v in values:
        if v is not None and not isinstance(v, (str, int, float, bool)):
            return None
        out.append(v)
    return out


def hint_schema(tp: Any) -> Dict[str, Any]:
    """The JSON Schema of one type hint (see the module docstring); ``{}`` when it has none."""
    if tp is None or tp is type(None):
        return {"type": "null"}
    if isinstance(tp, str):  # a forward reference get_type_hints could not resolve
        name = tp.strip()
        return {"type": _NAMED[name]} if name in _NAMED else {}
    if tp is Any or tp is object or tp is inspect.Parameter.empty or isinstance(tp, typing.TypeVar):
        return {}
    if hasattr(tp, "__metadata__") and hasattr(tp, "__origin__"):  # Annotated[X, ...] (3.9+)
        return hint_schema(tp.__origin__)
    raw_args = tuple(getattr(tp, "__args__", None) or ())
    origin = getattr(tp, "__origin__", None)
    if origin is typing.Union or type(tp).__name__ == "UnionType":  # Optional, Union, X | Y (3.10+)
        return _merge_union([hint_schema(a) for a in raw_args])
    args = tuple(a for a in raw_args if not isinstance(a, typing.TypeVar))  # bare List: (~T,)
    name = _origin_name(origin)
    if name == "Literal":
        values = _enum_values(getattr(tp, "__args__", ()))
        return {"enum": values} if values else {}
    if origin in _ARRAYS or name in _SEQUENCE_ORIGINS:
        out: Dict[str, Any] = {"type": "array"}
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if () in args:  # Tuple[()]
                return {"type": "array", "maxItems": 0}
            out["prefixItems"] = [hint_schema(a) for a in args]
            out["minItems"] = out["maxItems"] = len(args)
            return out
        if args:
            items = hint_schema(args[0])
            if items:
                out["items"] = items
        return out
    if origin is dict or name in _MAPPING_ORIGINS:
        out = {"type": "object"}
        if len(args) == 2:
            value_schema = hint_schema(args[1])
            if value_schema:
                out["additionalProperties"] = value_schema
        return out
    if origin is not None:  # another generic (Callable[...], a user's Generic[T]): no rule
        return {}
    if isinstance(tp, type):  # after the generics: list[int] is a type on Python 3.9-3.10
        if tp in _SCALARS:
            return {"type": _SCALARS[tp]}
        if issubclass(tp, enum.Enum):
            values = _enum_values([m.value for m in tp])
            return {"enum": values} if values else {}
        for base, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                           (dict, "object"), (collections.abc.Mapping, "object"), (_ARRAYS, "array")):
            if issubclass(tp, base):  # a subclass (class Path(str)) is still that JSON type
                return {"type": name}
        return {}
    return {}


def args_schema(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The JSON Schema of the keyword arguments ``fn`` takes, from its type hints."""
    sig = inspect.signature(fn)
    hints = _hints(fn)
    props: Dict[str, Any] = {}
    required: List[str] = []
    extra = False
    for name, param in sig.parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            extra = True
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            continue
        sch = hint_schema(hints.get(name, param.annotation))
        if param.default is None and sch:  # f(x: int = None): None is a value it takes
            sch = _merge_union([sch, {"type": "null"}])
        props[name] = sch
        if param.default is inspect.Parameter.empty:
            required.append(name)
    out: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if not extra:
        out["additionalProperties"] = False
    return out


def output_schema(fn: Callable[..., Any]) -> Optional[Dict[str, Any]]:
    """The JSON Schema of ``fn``'s return hint; None when it has none."""
    hints = _hints(fn)
    if "return" not in hints:
        return None
    sch = hint_schema(hints["return"])
    return sch or None


SchemaOption = Union[None, bool, Mapping[str, Any]]


def tool_schema(fn: Callable[..., Any], option: SchemaOption, field: str, tool: str) -> Optional[Dict[str, Any]]:
    """The ``schema`` (field ``"schema"``) or ``output_schema`` to register for tool ``fn``:
    ``option`` as given (a mapping), made from the hints (``True``), none (``False``), or the
    default (``None``): a ``@task``'s argument hints for ``schema``, nothing otherwise."""
    target = getattr(fn, "fn", fn) if hasattr(fn, "tool_schema") else fn
    if option is None:
        if field == "schema" and hasattr(fn, "tool_schema"):
            return cast(Optional[Dict[str, Any]], fn.tool_schema())
        return None
    if option is False:
        return None
    if option is True:
        if field == "schema":
            try:
                return args_schema(target)
            except (TypeError, ValueError) as exc:
                raise TypeError("tool %s: schema=True needs the signature of %r: %s" % (tool, target, exc)) from None
        out = output_schema(target)
        if out is None:
            raise ValueError("tool %s: output_schema=True needs a return hint that maps to JSON (-> dict, "
                             "-> List[str], ...) on %s" % (tool, getattr(target, "__qualname__", target)))
        return out
    if isinstance(option, Mapping):
        return dict(option)
    raise TypeError("tool %s: %s must be a JSON Schema (a dict), True (from the type hints), False or None; got %s"
                    % (tool, field, type(option).__name__))
