"""Values crossing between the program's process and the tests' process: data only, never code.

Both directions use marshal's version-2 layout, which holds exactly the built-in value types (None,
bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset, Ellipsis):

  tests -> program   ``marshal.dumps``, read with ``marshal.loads`` in the program's process (the
                     data comes from trusted code; nothing the program sends is ever unmarshalled);
  program -> tests   written with ``marshal.dumps`` by the program's process, read here by
                     `strict_loads`: a small parser of that layout's value codes that builds only
                     built-in values, checks every length against the bytes it has, refuses code
                     objects, references and anything else, and never calls ``marshal.loads``.

Bytes-like values (bytearray, memoryview) arrive as bytes, which compare equal to them. A value
marshal cannot hold (a deque, a Counter, a generator, a namedtuple) is sent *tagged*: every
tuple in a tagged body is a record ``(kind, *payload)`` (`tag`, `untag`); a real tuple is
``("t", *items)``. An object that is not data (a ``re.Match``, an object of the program's own
class) never crosses: the program's side keeps it and sends a record ``("ob", handle, type name,
repr, truth value)``, which the tests' side turns into a stand-in equal only to itself; a stand-in
or a proxy passed back to the program crosses as ``("obj", handle)`` / ``("ref", name)``.
Standard library only; this file runs in the sandbox image.
"""
from __future__ import annotations

import marshal

MARSHAL_VERSION = 2  # no references (FLAG_REF), no code in what either side accepts
MAX_DEPTH = 200
MAX_FRAME = 16 << 20  # one reply; a larger one fails the test (no data set's result comes close)
MAX_ITEMS = 10_000_000  # an iterator is materialised up to this many items
DEFAULT_FACTORIES = ("list", "int", "set", "dict", "str", "float", "tuple", "bool", "frozenset", "bytes")


class NotData(Exception):
    """A value that cannot cross the process boundary as data (the message says which)."""


# --- tagging (both sides) -------------------------------------------------------------------------
def _type_name(value) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "")
    return kind.__qualname__ if module in ("builtins", "", None) else f"{module}.{kind.__qualname__}"


def tag(value, ref_of=None, depth: int = 0, opaque=None):
    """`value` as a marshal-able body in which every tuple is a tag record. `ref_of(value)` gives
    the record of a value that crosses by reference (a proxy of a program function, a stand-in of a
    program object), or None. `opaque(value)` (the program's side only) gives the record of an
    object that is not data; without it such a value raises NotData."""
    if depth > MAX_DEPTH:
        raise NotData(f"a value nested deeper than {MAX_DEPTH} levels (or one that contains itself)")
    kind = type(value)
    if value is None or kind is bool or value is Ellipsis:
        return value
    if kind in (int, float, complex, str, bytes):
        return value
    if ref_of is not None:
        record = ref_of(value)
        if record is not None:
            return record
    deeper = depth + 1
    # Subclasses of built-in types cross as their built-in value (a namedtuple as its tuple, an
    # IntEnum as its int): what the other side gets can compare only by the built-in type's rules.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, complex):
        return complex(value.real, value.imag)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)  # as marshal itself writes them: bytes-like values arrive as bytes
    if isinstance(value, tuple):
        return ("t",) + tuple(tag(item, ref_of, deeper, opaque) for item in tuple.__iter__(value))
    if isinstance(value, list):
        return [tag(item, ref_of, deeper, opaque) for item in list.__iter__(value)]
    if isinstance(value, frozenset):
        return frozenset(tag(item, ref_of, deeper, opaque) for item in frozenset.__iter__(value))
    if isinstance(value, set):
        return {tag(item, ref_of, deeper, opaque) for item in set.__iter__(value)}
    if isinstance(value, range):
        return ("rg", value.start, value.stop, value.step)
    if isinstance(value, dict):
        pairs = [[tag(k, ref_of, deeper, opaque), tag(v, ref_of, deeper, opaque)] for k, v in dict.items(value)]
        special = _dict_kind(value)
        if special is None:
            return {k: v for k, v in pairs}
        return special + (pairs,)
    name = _type_name(value)
    if name == "collections.deque":
        return ("dq", value.maxlen, [tag(item, ref_of, deeper, opaque) for item in value])
    if name == "fractions.Fraction":
        return ("fr", int(value.numerator), int(value.denominator))
    if name == "decimal.Decimal":
        return ("de", str(value))
    if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
        items = []
        for item in value:
            if len(items) >= MAX_ITEMS:
                raise NotData(f"an iterator with more than {MAX_ITEMS} items")
            items.append(tag(item, ref_of, deeper, opaque))
        return ("it", items)
    if opaque is not None:
        return opaque(value, name)
    raise NotData(f"a value of type {name!r}")


def _dict_kind(value) -> tuple | None:
    """None for a plain dict; else the tag record's head for the collections dict types."""
    name = _type_name(value)
    if name == "collections.Counter":
        return ("ct",)
    if name == "collections.OrderedDict":
        return ("od",)
    if name == "collections.defaultdict":
        factory = value.default_factory
        label = None if factory is None else getattr(factory, "__name__", "")
        if label is not None and (label not in DEFAULT_FACTORIES or factory is not _builtin(label)):
            raise NotData(f"a defaultdict whose default factory is {label or type(factory).__name__!r}")
        return ("dd", label)
    return None


def _builtin(name: str):
    import builtins

    return getattr(builtins, name, None)


def untag(body, resolve_ref=None, depth: int = 0):
    """The value a tagged body stands for. Raises NotData on a record it does not know."""
    if depth > MAX_DEPTH:
        raise NotData(f"a value nested deeper than {MAX_DEPTH} levels")
    kind = type(body)
    deeper = depth + 1
    if kind is list:
        return [untag(item, resolve_ref, deeper) for item in body]
    if kind is dict:
        return {untag(k, resolve_ref, deeper): untag(v, resolve_ref, deeper) for k, v in body.items()}
    if kind is set:
        return {untag(item, resolve_ref, deeper) for item in body}
    if kind is frozenset:
        return frozenset(untag(item, resolve_ref, deeper) for item in body)
    if kind is not tuple:
        return body
    if not body or type(body[0]) is not str:
        raise NotData("a tagged value without its kind")
    head, rest = body[0], body[1:]
    if head == "t":
        return tuple(untag(item, resolve_ref, deeper) for item in rest)
    if head in ("ref", "obj", "ob") and resolve_ref is not None:
        return resolve_ref(head, rest)
    return _untag_record(head, rest, resolve_ref, deeper)


def _pairs(body, resolve_ref, depth):
    if type(body) is not list or not all(type(p) is list and len(p) == 2 for p in body):
        raise NotData("a mapping record without a list of pairs")
    return [(untag(k, resolve_ref, depth), untag(v, resolve_ref, depth)) for k, v in body]


def _untag_record(head: str, rest: tuple, resolve_ref, depth: int):
    import collections

    shape = tuple(type(item) for item in rest)
    if head == "rg" and shape == (int, int, int) and rest[2] != 0:
        return range(*rest)
    if head == "it" and shape == (list,):
        return iter(untag(rest[0], resolve_ref, depth))
    if head == "dq" and len(rest) == 2 and type(rest[1]) is list and (rest[0] is None or type(rest[0]) is int):
        return collections.deque(untag(rest[1], resolve_ref, depth), rest[0])
    if head == "ct" and len(rest) == 1:
        return collections.Counter(dict(_pairs(rest[0], resolve_ref, depth)))
    if head == "od" and len(rest) == 1:
        return collections.OrderedDict(_pairs(rest[0], resolve_ref, depth))
    if head == "dd" and len(rest) == 2 and (rest[0] is None or rest[0] in DEFAULT_FACTORIES):
        factory = None if rest[0] is None else _builtin(rest[0])
        return collections.defaultdict(factory, _pairs(rest[1], resolve_ref, depth))
    if head == "fr" and shape == (int, int) and rest[1] != 0:
        import fractions

        return fractions.Fraction(rest[0], rest[1])
    if head == "de" and shape == (str,) and len(rest[0]) <= 10_000:
        import decimal

        try:
            return decimal.Decimal(rest[0])
        except decimal.InvalidOperation:
            raise NotData("a Decimal record that is not a number") from None
    raise NotData(f"an unknown tagged record {head[:40]!r}")


def pack(head: tuple, value, ref_of=None, version: int = MARSHAL_VERSION, opaque=None) -> bytes:
    """A frame body: ``head + ("p", value)`` when marshal holds `value` as it is, else
    ``head + ("t", tag(value))``. Raises NotData when `value` cannot cross."""
    try:
        return marshal.dumps(head + ("p", value), version)
    except ValueError:
        pass
    return marshal.dumps(head + ("t", tag(value, ref_of, 0, opaque)), version)


def unpack_value(mode, body, resolve_ref=None):
    if mode == "p":
        return body
    if mode == "t":
        return untag(body, resolve_ref)
    raise NotData(f"an unknown value mode {str(mode)[:20]!r}")


# --- framing (4-byte big-endian length, then the body) ----------------------------------------------
def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


# --- the strict reader of what the program sends ----------------------------------------------------
_CONSTANTS = {"N": None, "T": True, "F": False, ".": Ellipsis}


class StrictReader:
    """Parses marshal version-2 value codes into built-in values; anything else raises NotData."""

    def __init__(self, data: bytes) -> None:
        import struct

        self.data = memoryview(data)
        self.pos = 0
        self._i32 = struct.Struct("<i").unpack_from
        self._f64 = struct.Struct("<d").unpack_from
        self._c128 = struct.Struct("<dd").unpack_from

    def _take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise NotData("a reply cut short or with a length beyond its end")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def _size(self, width: int = 4) -> int:
        if width == 1:
            return self._take(1)[0]
        (size,) = self._i32(self._take(4))
        if size < 0 or size > len(self.data) - self.pos:
            raise NotData("a reply with an impossible length")
        return size

    def value(self, depth: int = 0):
        if depth > MAX_DEPTH:
            raise NotData(f"a reply nested deeper than {MAX_DEPTH} levels")
        code = self._take(1)[0]
        if code & 0x80:
            raise NotData("a reply with object references (only plain values are accepted)")
        code = chr(code)
        if code in _CONSTANTS:
            return _CONSTANTS[code]
        if code == "i":
            return self._i32(self._take(4))[0]
        if code == "l":
            return self._long()
        if code == "g":
            return self._f64(self._take(8))[0]
        if code == "y":
            real, imag = self._c128(self._take(16))
            return complex(real, imag)
        if code in "ut":
            return self._text(self._size())
        if code in "aA":
            return self._ascii(self._size())
        if code in "zZ":
            return self._ascii(self._size(1))
        if code == "s":
            return bytes(self._take(self._size()))
        if code in "([<>":
            count = self._size()
            items = [self.value(depth + 1) for _ in range(count)]
            return self._container(code, items)
        if code == ")":
            return tuple(self.value(depth + 1) for _ in range(self._size(1)))
        if code == "{":
            result = {}
            while True:
                if self.pos < len(self.data) and self.data[self.pos] == ord("0"):
                    self.pos += 1
                    return result
                key = self.value(depth + 1)
                result[self._hashable(key)] = self.value(depth + 1)
        raise NotData(f"a reply with a value code {code!r} that is not plain data")

    def _text(self, size: int) -> str:
        try:
            return str(self._take(size), "utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise NotData("a reply with a string that is not UTF-8") from None

    def _ascii(self, size: int) -> str:
        try:
            return str(self._take(size), "ascii")
        except UnicodeDecodeError:
            raise NotData("a reply with an ASCII string that is not ASCII") from None

    def _long(self) -> int:
        (count,) = self._i32(self._take(4))
        if abs(count) > (len(self.data) - self.pos) // 2:
            raise NotData("a reply with an impossible length")
        digits = self._take(2 * abs(count))
        if any(digits[2 * i + 1] & 0x80 for i in range(abs(count))):
            raise NotData("a reply with a malformed integer")
        value = _from_15_bit_digits(digits, abs(count))
        return -value if count < 0 else value

    @staticmethod
    def _hashable(key):
        try:
            hash(key)
        except TypeError:
            raise NotData("a reply with an unhashable dict key or set item") from None
        return key

    def _container(self, code: str, items: list):
        if code == "(":
            return tuple(items)
        if code == "[":
            return items
        for item in items:
            self._hashable(item)
        return set(items) if code == "<" else frozenset(items)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise NotData("a reply with bytes after its value")


MAX_INT_DIGITS = 1 << 18  # 15-bit digits: integers of up to about 1.2 million decimal digits


def _from_15_bit_digits(digits: memoryview, count: int) -> int:
    """The integer of marshal's 15-bit digits, least significant first. Halves are joined level by
    level (n log n), so that a long integer cannot make the reader take quadratic time."""
    if count > MAX_INT_DIGITS:
        raise NotData(f"a reply with an integer of more than {MAX_INT_DIGITS} 15-bit digits")
    values = [digits[2 * i] | (digits[2 * i + 1] << 8) for i in range(count)]
    shift = 15
    while len(values) > 1:
        if len(values) % 2:
            values.append(0)
        values = [values[i] | (values[i + 1] << shift) for i in range(0, len(values), 2)]
        shift *= 2
    return values[0] if values else 0


def strict_loads(data: bytes):
    """The built-in value `data` encodes; NotData when it is anything but plain marshal v2 data."""
    reader = StrictReader(data)
    value = reader.value()
    reader.done()
    return value
