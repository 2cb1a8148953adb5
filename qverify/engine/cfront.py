"""Shared by both paths: C front end: preprocess with gcc -E, parse with pycparser, resolve types and
literals.

`parse_file(path, include_dirs)` returns a `TranslationUnit`: typedef-resolved global declarations
and function definitions, ready for symbolic execution (`qverify.engine.scalar.symex`). The system headers
are replaced by small stand-ins (`FAKE_HEADERS`, written to a temporary folder): stdint.h and the
like declare what verification C uses; stdio.h, math.h and stdlib.h declare their functions only so
that a call to one is reported as unsupported at the line of the call. gcc's `_Float16` is a
typedef name for pycparser (BUILTINS_HEADER, included first) resolved to binary16, and
`__extension__` (which silences -pedantic about it) is defined away.

Every error is an `InputError` (malformed C, preprocessor failure) or `UnsupportedError`
(well-formed C the engine does not handle) whose message starts with `file:line:`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from pycparser import c_ast, c_parser
from pycparser.c_parser import ParseError

from qverify.engine import c_types
from qverify.engine.c_types import Coord
from qverify.errors import InputError, ToolMissingError, UnsupportedError

PREPROCESS_TIMEOUT_S = 120
BUILTINS_HEADER = "qv_builtins.h"
# gcc's built-in type names that pycparser does not know: declared as typedef names by
# BUILTINS_HEADER, resolved to these types
BUILTIN_TYPES = {"_Float16": c_types.F16}

# Integer types of x86-64 Linux (LP64); int64_t is `long long` here (same width and rank behaviour).
FAKE_HEADERS = {
    "stdint.h": """#ifndef QV_FAKE_STDINT
#define QV_FAKE_STDINT
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t; typedef long intptr_t; typedef unsigned long uintptr_t;
typedef long long intmax_t; typedef unsigned long long uintmax_t;
#define INT8_MIN (-128)
#define INT8_MAX 127
#define UINT8_MAX 255
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define UINT16_MAX 65535
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define UINT32_MAX 4294967295U
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#define UINT64_MAX 18446744073709551615ULL
#define INT64_C(c) c ## LL
#define UINT64_C(c) c ## ULL
#define INT32_C(c) c
#endif
""",
    "inttypes.h": '#include "stdint.h"\n',
    "stdbool.h": "#define bool _Bool\n#define true 1\n#define false 0\n",
    "stddef.h": "typedef unsigned long size_t;\ntypedef long ptrdiff_t;\n#define NULL ((void *)0)\n",
    "limits.h": """#define CHAR_BIT 8
#define INT_MIN (-2147483647 - 1)
#define INT_MAX 2147483647
#define UINT_MAX 4294967295U
#define LONG_MIN (-9223372036854775807L - 1)
#define LONG_MAX 9223372036854775807L
#define LLONG_MIN (-9223372036854775807LL - 1)
#define LLONG_MAX 9223372036854775807LL
#define SHRT_MIN (-32768)
#define SHRT_MAX 32767
#define SCHAR_MIN (-128)
#define SCHAR_MAX 127
""",
    "float.h": "#define FLT_MAX 0x1.fffffep+127f\n#define DBL_MAX 0x1.fffffffffffffp+1023\n",
    "assert.h": "void __qv_c_assert(int condition, const char *text);\n"
    "#define assert(e) __qv_c_assert((e), #e)\n",
    "stdio.h": """typedef struct QV_FILE FILE;
typedef unsigned long size_t;
extern FILE *stdin; extern FILE *stdout; extern FILE *stderr;
int printf(const char *format, ...); int fprintf(FILE *stream, const char *format, ...);
int sprintf(char *s, const char *format, ...); int snprintf(char *s, size_t n, const char *format, ...);
int scanf(const char *format, ...); int puts(const char *s); int putchar(int c);
int getchar(void); char *fgets(char *s, int n, FILE *stream);
""",
    "stdlib.h": """typedef unsigned long size_t;
void abort(void); void exit(int status); void *malloc(size_t size); void free(void *p);
void *calloc(size_t n, size_t size); int abs(int x); long labs(long x); int rand(void);
long long strtoll(const char *s, char **end, int base); double strtod(const char *s, char **end);
""",
    "string.h": """typedef unsigned long size_t;
void *memcpy(void *d, const void *s, size_t n); void *memset(void *d, int c, size_t n);
size_t strlen(const char *s); int strcmp(const char *a, const char *b);
""",
    "math.h": """double floor(double x); double ceil(double x); double round(double x); double fabs(double x);
double exp(double x); double tanh(double x); double sqrt(double x); double ldexp(double x, int e);
double fmod(double x, double y); float expf(float x); float tanhf(float x); float fabsf(float x);
""",
    "setjmp.h": "typedef long jmp_buf[8];\nint setjmp(jmp_buf env);\nvoid longjmp(jmp_buf env, int v);\n",
    # included before the file (-include): pycparser knows no _Float16, so it is made a typedef
    # name here, which `build_unit` maps to binary16 (BUILTIN_TYPES); the declared type is unused
    BUILTINS_HEADER: "typedef float _Float16;\n",
}


# ------------------------------------------------------------------------------ C types


@dataclass(frozen=True, slots=True)
class ArrayT:
    elem: CType
    length: int | None


@dataclass(frozen=True, slots=True)
class PointerT:
    elem: CType


@dataclass(frozen=True, slots=True)
class VoidT:
    pass


@dataclass(frozen=True, slots=True)
class OpaqueT:
    """A struct or union: an error only where a value of it is used."""

    name: str


@dataclass(frozen=True, slots=True)
class FuncT:
    result: CType
    params: tuple[tuple[str, CType], ...]
    variadic: bool = False


CType = c_types.Type | ArrayT | PointerT | VoidT | FuncT | OpaqueT
VOID = VoidT()

_SCALAR_NAMES = {
    ("void",): VOID,
    ("_Bool",): c_types.BOOL,
    ("char",): c_types.I8,
    ("signed", "char"): c_types.I8,
    ("unsigned", "char"): c_types.U8,
    ("short",): c_types.I16,
    ("short", "int"): c_types.I16,
    ("signed", "short"): c_types.I16,
    ("signed", "short", "int"): c_types.I16,
    ("unsigned", "short"): c_types.U16,
    ("unsigned", "short", "int"): c_types.U16,
    ("int",): c_types.I32,
    ("signed",): c_types.I32,
    ("signed", "int"): c_types.I32,
    ("unsigned",): c_types.U32,
    ("unsigned", "int"): c_types.U32,
    ("long",): c_types.I64,
    ("long", "int"): c_types.I64,
    ("signed", "long"): c_types.I64,
    ("signed", "long", "int"): c_types.I64,
    ("unsigned", "long"): c_types.U64,
    ("unsigned", "long", "int"): c_types.U64,
    ("long", "long"): c_types.I64,
    ("long", "long", "int"): c_types.I64,
    ("signed", "long", "long"): c_types.I64,
    ("signed", "long", "long", "int"): c_types.I64,
    ("unsigned", "long", "long"): c_types.U64,
    ("unsigned", "long", "long", "int"): c_types.U64,
    ("float",): c_types.F32,
    ("double",): c_types.F64,
}


def coord_of(node: c_ast.Node | None) -> Coord | None:
    if node is None or node.coord is None:
        return None
    return Coord(str(node.coord.file), int(node.coord.line))


def where(node: c_ast.Node | None) -> str:
    coord = coord_of(node)
    return f"{coord}: " if coord else ""


def unsupported(node: c_ast.Node | None, what: str) -> UnsupportedError:
    return UnsupportedError(f"{where(node)}{what}")


# ------------------------------------------------------------------------------ literals

_INT_SUFFIX = re.compile(r"([uUlL]*)$")


def int_literal(text: str, node: c_ast.Node | None = None) -> tuple[int, c_types.Type]:
    """A C integer constant (decimal, octal, hex, char) and its type by C99 6.4.4.1."""
    if text.startswith(("'", "L'")):
        return char_literal(text, node), c_types.I32
    suffix = _INT_SUFFIX.search(text).group(1).lower()
    digits = text[: len(text) - len(suffix)] if suffix else text
    try:
        if digits.lower().startswith("0x"):
            value, decimal = int(digits, 16), False
        elif digits.lower().startswith("0b"):
            value, decimal = int(digits, 0), False
        elif len(digits) > 1 and digits.startswith("0"):
            value, decimal = int(digits, 8), False
        else:
            value, decimal = int(digits), True
    except ValueError as error:
        raise InputError(f"{where(node)}bad integer constant {text}") from error
    unsigned = "u" in suffix
    longs = suffix.count("l")
    candidates: list[c_types.Type] = []
    if not unsigned:
        if longs == 0:
            candidates.append(c_types.I32)
            if not decimal:
                candidates.append(c_types.U32)
        candidates.append(c_types.I64)
        if not decimal:
            candidates.append(c_types.U64)
    else:
        if longs == 0:
            candidates.append(c_types.U32)
        candidates.append(c_types.U64)
    for ty in candidates:
        if ty.min <= value <= ty.max:
            return value, ty
    raise InputError(f"{where(node)}integer constant {text} is too large")


_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34, "a": 7, "b": 8, "f": 12, "v": 11}


def char_literal(text: str, node: c_ast.Node | None = None) -> int:
    body = text[text.index("'") + 1 : -1]
    if len(body) == 1:
        return ord(body)
    if body.startswith("\\") and len(body) == 2 and body[1] in _ESCAPES:
        return _ESCAPES[body[1]]
    if body.startswith("\\x"):
        return int("0" + body[1:], 0)
    if body.startswith("\\") and body[1:].isdigit():
        return int(body[1:], 8)
    raise unsupported(node, f"character constant {text}")


FLOAT_FORMATS = {16: (11, -14, 15), 32: (24, -126, 127), 64: (53, -1022, 1023)}  # p, emin, emax


def nearest_float(value: Fraction, bits: int) -> float:
    """The binary16/32/64 value nearest to `value` (ties to even), computed exactly."""
    if value == 0:
        return 0.0
    mantissa_bits, min_exponent, max_exponent = FLOAT_FORMATS[bits]
    sign = -1.0 if value < 0 else 1.0
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    exponent = max(exponent, min_exponent)
    quantum = Fraction(2) ** (exponent - mantissa_bits + 1)
    scaled = magnitude / quantum
    rounded = int(scaled)
    remainder = scaled - rounded
    if remainder > Fraction(1, 2) or (remainder == Fraction(1, 2) and rounded % 2 == 1):
        rounded += 1
    result = rounded * quantum
    if result >= Fraction(2) ** (max_exponent + 1):
        return sign * float("inf")
    return sign * float(result)


def float_literal(text: str, node: c_ast.Node | None = None) -> tuple[float, c_types.Type]:
    """A C floating constant (decimal or hexadecimal, suffix f/l) rounded once to its type."""
    body = text
    ty = c_types.F64
    if body[-1] in "fF":
        body, ty = body[:-1], c_types.F32
    elif body[-1] in "lL":
        body = body[:-1]  # long double: treated as double
    try:
        if body.lower().startswith("0x"):
            exact = Fraction(float.fromhex(body)) if ty == c_types.F64 else _hex_fraction(body)
        else:
            exact = Fraction(body)
    except (ValueError, ZeroDivisionError) as error:
        raise InputError(f"{where(node)}bad floating constant {text}") from error
    return nearest_float(exact, ty.bits), ty


def _hex_fraction(body: str) -> Fraction:
    """The exact value of a hexadecimal floating literal (no rounding)."""
    match = re.fullmatch(r"0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?[pP]([+-]?\d+)", body)
    if match is None:
        raise ValueError(body)
    whole, fraction, exponent = match.group(1), match.group(2) or "", int(match.group(3))
    digits = int((whole or "0") + fraction, 16)
    return Fraction(digits) * Fraction(2) ** (exponent - 4 * len(fraction))


# ------------------------------------------------------------------------------ translation unit


@dataclass
class GlobalDecl:
    name: str
    ctype: CType
    const: bool
    init: c_ast.Node | None
    node: c_ast.Node


@dataclass
class TranslationUnit:
    """What symbolic execution needs: globals in order, function bodies, declared functions."""

    source: str
    globals: list[GlobalDecl] = field(default_factory=list)
    functions: dict[str, c_ast.FuncDef] = field(default_factory=dict)
    function_types: dict[str, FuncT] = field(default_factory=dict)
    typedefs: dict[str, tuple[CType, bool]] = field(default_factory=dict)
    enum_constants: dict[str, int] = field(default_factory=dict)

    def resolve(self, type_node: c_ast.Node) -> tuple[CType, bool]:
        """A pycparser type node to (C type, const-qualified)."""
        return TypeResolver(self).resolve(type_node)


class TypeResolver:
    def __init__(self, unit: TranslationUnit) -> None:
        self.unit = unit

    def resolve(self, node: c_ast.Node) -> tuple[CType, bool]:
        if isinstance(node, c_ast.Typename):
            return self.resolve(node.type)
        if isinstance(node, c_ast.TypeDecl):
            const = "const" in (node.quals or [])
            inner = node.type
            if isinstance(inner, c_ast.IdentifierType):
                ctype, inner_const = self.identifier(inner)
                return ctype, const or inner_const
            if isinstance(inner, c_ast.Enum):
                self.enum(inner)
                return c_types.I32, const
            if isinstance(inner, (c_ast.Struct, c_ast.Union)):
                return OpaqueT(f"{type(inner).__name__.lower()} {inner.name or ''}".strip()), const
            raise unsupported(node, f"type {type(inner).__name__}")
        if isinstance(node, c_ast.ArrayDecl):
            elem, const = self.resolve(node.type)
            length = None if node.dim is None else constant_int(node.dim, self.unit)
            if length is not None and length <= 0:
                raise unsupported(node, f"array of length {length}")
            return ArrayT(elem, length), const
        if isinstance(node, c_ast.PtrDecl):
            elem, const = self.resolve(node.type)
            return PointerT(elem), const
        if isinstance(node, c_ast.FuncDecl):
            result, _ = self.resolve(node.type)
            params: list[tuple[str, CType]] = []
            variadic = False
            for param in node.args.params if node.args else []:
                if isinstance(param, c_ast.EllipsisParam):
                    variadic = True
                    continue
                ptype, _ = self.resolve(param.type)
                if ptype == VOID:
                    continue
                if isinstance(ptype, ArrayT):
                    ptype = PointerT(ptype.elem)  # array parameters are pointers
                params.append((getattr(param, "name", None) or "", ptype))
            return FuncT(result, tuple(params), variadic), False
        raise unsupported(node, f"type construct {type(node).__name__}")

    def identifier(self, node: c_ast.IdentifierType) -> tuple[CType, bool]:
        names = tuple(n for n in node.names if n not in ("const", "volatile", "register", "restrict"))
        if len(names) == 1 and names[0] in self.unit.typedefs:
            return self.unit.typedefs[names[0]]
        key = tuple(sorted(names, key=_name_order))
        ctype = _SCALAR_NAMES.get(key)
        if ctype is None:
            raise unsupported(node, f"type '{' '.join(node.names)}'")
        return ctype, False

    def enum(self, node: c_ast.Enum) -> None:
        if node.values is None:
            return
        value = -1
        for enumerator in node.values.enumerators:
            value = constant_int(enumerator.value, self.unit) if enumerator.value is not None else value + 1
            self.unit.enum_constants[enumerator.name] = value


_ORDER = {"signed": 0, "unsigned": 0, "short": 1, "long": 1, "char": 2, "int": 3, "_Bool": 3}


def _name_order(name: str) -> tuple[int, str]:
    return (_ORDER.get(name, 4), name)


def constant_int(node: c_ast.Node, unit: TranslationUnit) -> int:
    """An integer constant expression (array sizes, enum values, case labels)."""
    if isinstance(node, c_ast.Constant) and node.type not in ("float", "double", "string"):
        return int_literal(node.value, node)[0]
    if isinstance(node, c_ast.ID) and node.name in unit.enum_constants:
        return unit.enum_constants[node.name]
    if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+", "~"):
        value = constant_int(node.expr, unit)
        return {"-": -value, "+": value, "~": ~value}[node.op]
    if isinstance(node, c_ast.Cast):
        return constant_int(node.expr, unit)
    if isinstance(node, c_ast.BinaryOp):
        a, b = constant_int(node.left, unit), constant_int(node.right, unit)
        operations = {
            "+": lambda: a + b,
            "-": lambda: a - b,
            "*": lambda: a * b,
            "/": lambda: int(a / b) if b else 0,
            "%": lambda: a % b if b else 0,
            "<<": lambda: a << b,
            ">>": lambda: a >> b,
            "&": lambda: a & b,
            "|": lambda: a | b,
            "^": lambda: a ^ b,
        }
        if node.op in operations:
            return operations[node.op]()
    raise unsupported(node, "expected an integer constant expression")


def build_unit(ast: c_ast.FileAST, source: str) -> TranslationUnit:
    """Collect typedefs, globals and functions of a parsed file."""
    unit = TranslationUnit(source)
    resolver = TypeResolver(unit)
    for ext in ast.ext:
        if isinstance(ext, c_ast.Typedef) and ext.name in BUILTIN_TYPES:
            unit.typedefs[ext.name] = (BUILTIN_TYPES[ext.name], False)
        elif isinstance(ext, c_ast.Typedef):
            unit.typedefs[ext.name] = resolver.resolve(ext.type)
        elif isinstance(ext, c_ast.FuncDef):
            ftype, _ = resolver.resolve(ext.decl.type)
            unit.function_types[ext.decl.name] = ftype  # type: ignore[assignment]
            unit.functions[ext.decl.name] = ext
        elif isinstance(ext, c_ast.Decl):
            if ext.name is None:
                if isinstance(ext.type, c_ast.Enum):
                    resolver.enum(ext.type)
                    continue
                if isinstance(ext.type, (c_ast.Struct, c_ast.Union)):
                    continue  # a tag declaration: only an error when used
                raise unsupported(ext, "declaration without a name")
            if isinstance(ext.type, c_ast.FuncDecl):
                ftype, _ = resolver.resolve(ext.type)
                unit.function_types.setdefault(ext.name, ftype)  # type: ignore[arg-type]
                continue
            if "extern" in (ext.storage or []) and ext.init is None:
                try:
                    ctype, const = resolver.resolve(ext.type)
                except UnsupportedError:
                    continue  # e.g. `extern FILE *stdin`: an error only when used
                unit.globals.append(GlobalDecl(ext.name, ctype, const, None, ext))
                continue
            ctype, const = resolver.resolve(ext.type)
            unit.globals.append(GlobalDecl(ext.name, ctype, const, ext.init, ext))
        elif isinstance(ext, c_ast.Pragma):
            continue
        else:
            raise unsupported(ext, f"top-level {type(ext).__name__}")
    return unit


# ------------------------------------------------------------------------------ preprocess + parse


def find_preprocessor() -> list[str]:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is not None:
        return [compiler, "-E"]
    cpp = shutil.which("cpp")
    if cpp is not None:
        return [cpp]
    raise ToolMissingError("no C preprocessor found (gcc or cpp): install gcc")


def preprocess(
    path: Path, include_dirs: Sequence[Path], defines: Sequence[str] = (), extra_flags: Sequence[str] = ()
) -> str:
    """`gcc -E` of `path` against the stand-in system headers; InputError on failure. `extra_flags`
    go to the preprocessor too (the lifted front end's `-dD`)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    with tempfile.TemporaryDirectory(prefix="qv-engine-") as scratch:
        fake = Path(scratch)
        for name, text in FAKE_HEADERS.items():
            (fake / name).write_text(text)
        command = [
            *find_preprocessor(),
            "-std=c99",
            "-nostdinc",
            "-undef",
            "-D__QVERIFY_ENGINE__=1",
            "-D__x86_64__=1",
            "-D__extension__=",  # gcc's marker that silences -pedantic (`__extension__ typedef _Float16 t;`)
            "-include",
            str(fake / BUILTINS_HEADER),
            *(f"-D{define}" for define in defines),
            *extra_flags,
            *(f"-I{directory}" for directory in include_dirs),
            f"-I{fake}",
            str(path),
        ]
        try:
            completed = subprocess.run(
                command, capture_output=True, text=True, timeout=PREPROCESS_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise InputError(f"{path}: the preprocessor timed out") from error
    if completed.returncode != 0:
        message = completed.stderr.strip().replace(str(fake) + "/", "")
        first = next((line for line in message.splitlines() if "error" in line), message[:400])
        raise InputError(f"{first.strip()}")
    return completed.stdout


_PARSE_ERROR = re.compile(r"^(.*?):(\d+):(\d+): (.*)$", re.DOTALL)


def parse_text(text: str, filename: str) -> c_ast.FileAST:
    """pycparser on preprocessed text; InputError `file:line: message` on a syntax error."""
    parser = c_parser.CParser()
    try:
        return parser.parse(text, filename)
    except ParseError as error:
        message = str(error)
        match = _PARSE_ERROR.match(message)
        if match:
            raise InputError(f"{match.group(1)}:{match.group(2)}: syntax error: {match.group(4)}") from error
        detail = message.split(": ", 1)[-1]
        raise InputError(f"{_parser_position(parser, filename)}: syntax error: {detail}") from error


def _parser_position(parser: c_parser.CParser, filename: str) -> str:
    """file:line of the token where pycparser stopped (its messages do not always carry one)."""
    try:
        token = parser._tokens.peek(1)
        return f"{parser.clex._filename or filename}:{token.lineno}"
    except (AttributeError, TypeError):
        return filename


def parse_file(path: Path, include_dirs: Sequence[Path] = (), defines: Sequence[str] = ()) -> TranslationUnit:
    """Preprocess and parse a C file into a `TranslationUnit`.

    :raises InputError: the file is missing, does not preprocess or does not parse.
    :raises UnsupportedError: a global construct the engine does not handle (structs, ...).
    :raises ToolMissingError: no preprocessor.
    """
    text = preprocess(path, include_dirs, defines)
    return build_unit(parse_text(text, str(path)), str(path))
