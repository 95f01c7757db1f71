"""A pickle opcode walker for the raw pickles some datasets ship (LEAD's metas/bboxes,
Bench2Drive's HD map .npz): it reads the opcodes (pickletools.genops, no unpickler), accepts only
what those writers emit and builds the values itself, so no pickle machinery and no numpy
internal ever sees file-supplied state.

The writers pickle dicts, lists, tuples, strings, numbers, None and numpy arrays and scalars
(LEAD: `pickletools.optimize(pickle.dumps(data, HIGHEST_PROTOCOL))`). numpy pickles those as
- a dtype: `numpy.dtype` REDUCE `(typestr, False, True)`, then BUILD
  `(3, order, None, None, None, -1, -1, 0)`: accepted only for the numeric type strings of
  NUMERIC, with the byte order from `order` alone (np.dtype's own __setstate__ trusts fields,
  offsets and flags: a field past the buffer read the packer's heap into the shards);
- an array (protocol 5): `numpy[._]core.numeric._frombuffer(buffer, dtype, shape, order)`;
- an array (protocols 2-4, and non-contiguous ones): `numpy[._]core.multiarray._reconstruct(
  numpy.ndarray, (0,), b'b')`, then BUILD `(1, shape, dtype, fortran, data)`;
- a scalar: `numpy[._]core.multiarray.scalar(dtype, data)`;
- (protocol 2) bytes as `_codecs.encode(text, 'latin1')`, empty ones as `__builtin__.bytes()`.
Each array is np.frombuffer over bytes that fill its shape exactly, checked first. An object
array (dtype 'O8', BUILD state flags 63, its data a list of the values), which np.save writes
for `np.array(list_of_pairs, dtype=object)` (Bench2Drive's gen_hdmap.py), is read only by a
Walk(objects=True), and built as nested lists of the walked values, never as an ndarray.
Every other opcode and global is refused by name. Every object the walk makes counts against
pickle_values (an array its elements); pickle_measure.measure then bounds the finished value as
it will be stored (a memo reference to a container counts the whole container again, a cycle
is refused, nesting within json_depth), without recursion.
"""
from __future__ import annotations

import copy
import math
import pickletools
from typing import Any, Callable

import numpy as np

from .. import limits

# the type strings numpy's dtype pickle names for numeric dtypes (np.dtype(t).__reduce__())
NUMERIC = {t: np.dtype(t) for t in ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                    "f2", "f4", "f8")}
_CORES = ("numpy.core", "numpy._core")   # numpy 1.x and 2.x spellings
GLOBALS = {("numpy", "dtype"): "dtype", ("numpy", "ndarray"): "ndarray",
           ("_codecs", "encode"): "encode", ("__builtin__", "bytes"): "bytes",
           **{(f"{c}.multiarray", n): n for c in _CORES for n in ("_reconstruct", "scalar")},
           **{(f"{c}.numeric", "_frombuffer"): "_frombuffer" for c in _CORES}}
# a string or bytes counts one value per this many characters, so that pickle_values x 64
# (256 MiB at the default) bounds the text a string repeated through the memo expands to
STRING_CHARS = 64
MAX_NDIM = 32
OBJECT = np.dtype("O")   # an object array's dtype, only as a marker: never given to numpy
# numpy's BUILD state of the object dtype ('O8'): its flags (63) mark the items as references
OBJECT_STATE = (3, "|", None, None, None, -1, -1, 63)
MAX_INT_BITS = 128   # the files' ints are ids and counters; a huge one only slows JSON


class Refused(ValueError):
    """The pickle holds something its writer never writes; the message says what."""


class Global:
    """A global the walk allows, as the callable of a later REDUCE (never a value)."""
    __slots__ = ("name", "spelled")

    def __init__(self, name: str, spelled: str) -> None:
        self.name, self.spelled = name, spelled


class _Pending:
    """A dtype or an array that REDUCE began and its BUILD completes (value set)."""
    __slots__ = ("kind", "typestr", "value", "built")

    def __init__(self, kind: str, typestr: str = "") -> None:
        self.kind, self.typestr, self.value, self.built = kind, typestr, None, False


def _same(got: Any, want: Any) -> bool:
    """got equals want, item by item of the same type (no numpy comparisons); recursive only
    as deep as `want`, a constant here."""
    if type(want) is tuple:
        return (type(got) is tuple and len(got) == len(want)
                and all(_same(g, w) for g, w in zip(got, want)))
    return type(got) is type(want) and got == want


def _shape(shape: Any) -> tuple[int, ...]:
    if (type(shape) is not tuple or len(shape) > MAX_NDIM
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise Refused("an array shape that is not a tuple of at most 32 whole numbers >= 0")
    return shape


def array_values(shape: tuple[int, ...]) -> int:
    """Values an array of this shape is stored as (tolist's nested lists and numbers)."""
    total, run = 1, 1
    for n in shape:
        run *= n
        total += run
    return total


def _array(buf: Any, dtype: Any, shape: Any, fortran: bool, walk: "Walk") -> np.ndarray:
    """An array from bytes that fill its shape exactly, within array_bytes and pickle_values."""
    if type(buf) not in (bytes, bytearray) or not isinstance(dtype, np.dtype) \
            or dtype.hasobject:
        raise Refused("an array that is not raw bytes and a numeric dtype")
    shape = _shape(shape)
    if math.prod(shape) * dtype.itemsize != len(buf):
        raise Refused(f"an array of shape {shape} and {dtype} over {len(buf):,} bytes; "
                      "its bytes must fill its shape exactly")
    limits.active().check("array_bytes", len(buf), "an array in the pickle (bytes)")
    walk.add(array_values(shape) - 1)
    flat = np.frombuffer(buf, dtype).copy()   # its own writable memory, as numpy's pickle
    return flat.reshape(shape, order="F" if fortran else "C")


def _object_array(items: Any, shape: Any, fortran: bool, walk: "Walk") -> list:
    """An object array's items (already walked values) as nested lists of its shape, C order;
    its nested lists count against pickle_values as a numeric array's do."""
    shape = _shape(shape)
    if type(items) is not list or len(items) != math.prod(shape) or fortran:
        raise Refused(f"an object array of shape {shape} whose data is not a list of its "
                      "items in C order")
    walk.add(array_values(shape) - 1 - len(items))
    if not shape:   # a 0-d array: its one item
        return items[0]
    if not items:   # no item to group: the lists down to the first empty axis
        rows: list = []
        for n in reversed(shape[:shape.index(0)]):
            rows = [copy.deepcopy(rows) for _ in range(n)]   # (counted above)
        return rows
    rows = items
    for n in reversed(shape[1:]):   # group the flat items into rows, innermost axis first
        rows = [rows[i:i + n] for i in range(0, len(rows), n)]
    return rows


def _dtype(args: tuple, walk: "Walk") -> _Pending:
    typestr = args[0] if len(args) == 3 else None
    if typestr == "O8" and walk.objects and _same(args[1:], (False, True)):
        return _Pending("dtype", typestr)
    if type(typestr) is not str or typestr not in NUMERIC or not _same(args[1:], (False, True)):
        name = f"{typestr!r}" if type(typestr) is str and len(typestr) < 40 else "?"
        raise Refused(f"the dtype {name}; only numeric ones ({', '.join(NUMERIC)}) are read")
    return _Pending("dtype", typestr)


def _build_dtype(pend: _Pending, state: Any) -> np.dtype:
    if pend.typestr == "O8":
        if not _same(state, OBJECT_STATE):
            raise Refused("an object dtype whose state is not numpy's plain one")
        return OBJECT
    order = state[1] if type(state) is tuple and len(state) == 8 else None
    if type(order) is not str or order not in "<>|=" or len(order) != 1 \
            or not _same(state[:1] + state[2:], (3, None, None, None, -1, -1, 0)):
        raise Refused(f"a dtype {pend.typestr!r} whose state is not a plain numeric one "
                      "(fields, subarrays, offsets or flags)")
    # np.dtype of a whitelisted string: '<f8' on a little-endian host is the native float64
    return np.dtype(order + pend.typestr) if order in "<>" else NUMERIC[pend.typestr]


def _build_array(state: Any, walk: "Walk") -> np.ndarray:
    if type(state) is not tuple or len(state) != 5 or type(state[0]) is not int \
            or state[0] != 1 or type(state[3]) is not bool:
        raise Refused("an array state that is not numpy's (1, shape, dtype, fortran, data)")
    if state[2] is OBJECT:
        return _object_array(state[4], state[1], state[3], walk)
    return _array(state[4], state[2], state[1], state[3], walk)


def _call(func: Any, args: Any, walk: "Walk") -> Any:
    """REDUCE of an allowed global, built here."""
    if type(func) is not Global or type(args) is not tuple:
        raise Refused(f"a call of a {type(func).__name__}; only numpy's array and scalar "
                      "reconstructors are read")
    name = func.name
    if name == "dtype":
        return _dtype(args, walk)
    if name == "_frombuffer" and len(args) == 4 and type(args[3]) is str \
            and args[3] in ("C", "F"):
        return _array(args[0], args[1], args[2], args[3] == "F", walk)
    if name == "scalar" and len(args) == 2 and isinstance(args[0], np.dtype) \
            and not args[0].hasobject and type(args[1]) is bytes and len(args[1]) == args[0].itemsize:
        return np.frombuffer(args[1], args[0])[0]
    if name == "_reconstruct" and len(args) == 3 and type(args[0]) is Global \
            and args[0].name == "ndarray" and _same(args[1:], ((0,), b"b")):
        return _Pending("array")
    if name == "_reconstruct":
        raise Refused("an array _reconstruct made of another shape before its data")
    if name == "encode" and len(args) == 2 and type(args[0]) is str \
            and _same(args[1], "latin1"):
        walk.add(len(args[0]) // STRING_CHARS)
        return args[0].encode("latin-1")
    if name == "bytes" and args == ():
        return b""
    raise Refused(f"a call of {func.spelled} with arguments numpy's own pickles never give")


class Walk:
    """One pickle's opcodes -> its value; Refused or LimitError naming what is wrong."""

    def __init__(self, objects: bool = False) -> None:
        self.objects = objects   # read object arrays (as nested lists): the map .npz only
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.count = 0
        self.gotten: list[Any] = []   # what memo GETs fetched (shared())
        self.limit = limits.active().pickle_values

    def add(self, n: int) -> None:
        self.count += n
        if self.count > self.limit:
            limits.active().check("pickle_values", self.count,
                                  "the objects a pickle builds (an array its elements)")

    def run(self, raw: bytes) -> Any:
        for op, arg, pos in pickletools.genops(raw):
            handler = OPS.get(op.name)
            if handler is None:
                raise Refused(f"the opcode {op.name} at byte {pos}, which these files' writer "
                              "never writes")
            self.add(1)
            if op.name == "STOP":
                if len(self.stack) != 1 or self.marks:
                    raise Refused("a pickle that stops with a stack not of one value")
                return self.value(self.stack.pop())
            handler(self, arg)
        raise Refused("a pickle without STOP")   # (genops raises first)

    @staticmethod
    def value(x: Any) -> Any:
        """A stack item as it goes into a tuple, list or dict: a BUILT dtype or array is its
        result (a global may go into a REDUCE's arguments; pickles.measure refuses it as a
        value)."""
        if type(x) is _Pending:
            if not x.built:   # (an object array may build None)
                raise Refused(f"a {x.kind} used before its BUILD")
            return x.value
        return x

    def pop(self) -> Any:
        if not self.stack:
            raise Refused("an opcode that pops an empty stack")
        return self.value(self.stack.pop())

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Refused("an opcode that needs a MARK without one")
        items, self.stack = self.stack, self.marks.pop()
        return [self.value(x) for x in items]

    def top(self, kind: type) -> Any:
        if not self.stack or type(self.stack[-1]) is not kind:
            raise Refused(f"an opcode that fills a {kind.__name__} on something else")
        return self.stack[-1]

    def push(self, x: Any) -> None:
        if type(x) in (str, bytes, bytearray):
            self.add(len(x) // STRING_CHARS)
        if type(x) is int and x.bit_length() > MAX_INT_BITS:
            raise Refused(f"an integer of {x.bit_length():,} bits")
        self.stack.append(x)

    def push_built(self, x: Any) -> None:
        """(a method: `w.stack.append(w.pop_mark())` would append to the stack pop_mark
        replaces)"""
        self.stack.append(x)

    def set_items(self, items: list[Any]) -> None:
        target = self.top(dict)
        if len(items) % 2:
            raise Refused("SETITEMS with a key and no value")
        for key, val in zip(items[::2], items[1::2]):
            if type(key) not in (str, int, float, bool, type(None)) \
                    and not isinstance(key, np.generic):
                raise Refused(f"a dict key that is a {type(key).__name__}; expected a string "
                              "or a number")
            target[key] = val

    def global_(self, module: Any, name: Any) -> None:
        spelled = f"{module}.{name}"[:200]
        if (module, name) not in GLOBALS:
            raise Refused(f"the global {spelled}, which these files' writer never writes "
                          "(only numpy arrays and scalars); nothing was run")
        self.stack.append(Global(GLOBALS[module, name], spelled))

    def memo_get(self, index: int) -> None:
        if index not in self.memo:
            raise Refused(f"a memo GET of {index}, never PUT")
        self.gotten.append(self.memo[index])
        self.stack.append(self.memo[index])

    def shared(self) -> set[int]:
        """ids of the values a memo GET reached: the only ones the finished value may hold
        more than once (every other opcode builds a new object), for pickle_measure.measure."""
        return {id(self.value(x)) if type(x) is _Pending and x.built else id(x)
                for x in self.gotten}

    def memo_put(self, index: int) -> None:
        if not self.stack:
            raise Refused("a memo PUT of an empty stack")
        self.memo[index] = self.stack[-1]

    def build(self) -> None:
        state = self.pop()
        target = self.stack[-1] if self.stack else None
        if type(target) is not _Pending or target.built:
            raise Refused(f"BUILD on a {type(target).__name__}; only numpy's dtype and array "
                          "pickles use BUILD")
        target.value = (_build_dtype(target, state) if target.kind == "dtype"
                        else _build_array(state, self))
        target.built = True


def _dict(w: Walk, arg: Any) -> None:
    items = w.pop_mark()
    w.push_built({})
    w.set_items(items)


def _const(value: Any) -> Callable[[Walk, Any], None]:
    return lambda w, arg: w.stack.append(value)


def _tuple(n: int) -> Callable[[Walk, Any], None]:
    def op(w: Walk, arg: Any) -> None:
        items = [w.pop() for _ in range(n)][::-1]
        w.stack.append(tuple(items))
    return op


def _global_op(w: Walk, arg: str) -> None:
    module, _, name = arg.partition(" ")
    w.global_(module, name)


def _stack_global(w: Walk, arg: Any) -> None:
    name, module = w.pop(), w.pop()
    if type(module) is not str or type(name) is not str:
        raise Refused("a STACK_GLOBAL whose names are not strings")
    w.global_(module, name)


def _reduce(w: Walk, arg: Any) -> None:
    args = w.pop()
    if not w.stack:
        raise Refused("REDUCE without a callable")
    w.stack.append(_call(w.stack.pop(), args, w))


OPS: dict[str, Callable[[Walk, Any], None]] = {
    "PROTO": lambda w, arg: None, "FRAME": lambda w, arg: None, "STOP": lambda w, arg: None,
    **{n: Walk.push for n in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "BINFLOAT",
                             "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES",
                             "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8")},
    "NONE": _const(None), "NEWTRUE": _const(True), "NEWFALSE": _const(False),
    "EMPTY_LIST": lambda w, arg: w.stack.append([]),
    "EMPTY_DICT": lambda w, arg: w.stack.append({}),
    "EMPTY_TUPLE": _const(()),
    "MARK": lambda w, arg: (w.marks.append(w.stack), setattr(w, "stack", [])),
    "TUPLE": lambda w, arg: w.push_built(tuple(w.pop_mark())),
    "TUPLE1": _tuple(1), "TUPLE2": _tuple(2), "TUPLE3": _tuple(3),
    "LIST": lambda w, arg: w.push_built(w.pop_mark()),
    "DICT": _dict,
    "APPEND": lambda w, arg: (lambda v: w.top(list).append(v))(w.pop()),
    "APPENDS": lambda w, arg: (lambda vs: w.top(list).extend(vs))(w.pop_mark()),
    "SETITEM": lambda w, arg: (lambda v, k: w.set_items([k, v]))(w.pop(), w.pop()),
    "SETITEMS": lambda w, arg: w.set_items(w.pop_mark()),
    "MEMOIZE": lambda w, arg: w.memo_put(len(w.memo)),
    "BINPUT": lambda w, arg: w.memo_put(arg), "LONG_BINPUT": lambda w, arg: w.memo_put(arg),
    "BINGET": lambda w, arg: w.memo_get(arg), "LONG_BINGET": lambda w, arg: w.memo_get(arg),
    "GLOBAL": _global_op, "STACK_GLOBAL": _stack_global,
    "REDUCE": _reduce, "BUILD": lambda w, arg: w.build(),
}

