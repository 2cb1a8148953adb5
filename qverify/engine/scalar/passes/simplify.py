"""Scalar path: simplification with intervals, step by step: `simplify(program) -> Simplified`.

The steps of a program are processed in execution order. Each step's condition is rebuilt bottom-up
through the node factory (constant folding, hash-consing, the factory's identities) and the rules
below, using intervals that hold at that step: the interval of every node is computed forward from
its children, and every assume and assert before the step contributes facts (`x >= c` and the like)
that narrow the intervals of the nodes they talk about. A fact from step k is valid for every later
step: an execution that reaches step j > k has passed step k. So the simplified program gives the
same outcome as the original one (the first failing step) for every input -- the property the
tests check with the evaluator.

Rules (x, y nodes; c constants; [lo, hi] intervals), applied to integer nodes:
    cmp(x, y)                       -> true/false        when the intervals decide it
    ite(c, a, b)                    -> a or b            when the interval of c decides it
    ite(x < y, y, x), ite(x > y, x, y), ...  -> max(x, y) / min(x, y)  (ReLU: x < 0 ? 0 : x)
    ite(x > y, (T)x, (T)y), ...             -> (T)max(x, y) / (T)min(x, y)  (int8 max pools)
    ite(x < c1, c1, min(x, c2))     -> max(min(x, c2), c1)   (c1 <= c2; saturation)
    max(x, y) -> x  when lo(x) >= hi(y);  min(x, y) -> x  when hi(x) <= lo(y)
    (T)(U)x -> (T)x                 when the interval of x fits U
    ite(v >= 0, (v + h) >> l, -((-v + h) >> l))   -> shr_rna(v, l)   (h = 2^(l-1): fxp_shift nearest)
    ite(v >= 0, v >> l, -((-v + 2^l - 1) >> l))   -> v >> l           (fxp_shift floor)
    ((i64)(((u64)v & (2^w - 1)) ^ 2^(w-1))) - 2^(w-1)  -> (i64)(int_w)v  (fxp_quantize wrap)
    a table read, or an ite over one, that depends on a single integer value b with few enough
    values -> step(b): a piecewise-constant function tabulated with the evaluator. Where the
    structure gives the breakpoints (comparisons of b with constants, table entries or steps,
    steps of b, anything built from those: `_breakpoints`), the function is evaluated once per
    piece; otherwise [lo, hi] is bisected until intervals prove it constant or a part is small
    enough to enumerate.

Before/after on fxp_mult(w, x) with w = 24 > 0 and x in [0, 100], <4,4> nearest, saturate:
    p = 24 * (i64)x; ite(p >= 0, (p + 8) >> 4, -((-p + 8) >> 4)) -> clamp -> (i32)
    becomes  (i32)((24 * (i64)x + 8) >> 4)
"""

from __future__ import annotations

import itertools
import time as _time
from dataclasses import dataclass, field

import numpy as np

from qverify.engine import c_types
from qverify.engine.scalar import ssa
from qverify.engine.scalar.evaluate import evaluate_nodes
from qverify.engine.scalar.passes import intervals as iv
from qverify.engine.scalar.ssa import Binary, Cast, Compare, Const, Ite, Node, NodeManager, Read, Step, Unary
from qverify.errors import ResourceLimitError

ENUMERATE_LIMIT = 1 << 20  # a region of a tabulated function with at most this many values is enumerated
TABULATE_BUDGET = 1 << 23  # at most this many values are evaluated per tabulation
BREAKPOINT_BUDGET = 1 << 16  # at most this many structural breakpoints per tabulation


@dataclass
class Simplified:
    """The simplified program and the intervals that hold at each of its steps.

    `interval(node, step)` is an interval of `node` valid for executions that reach step `step`
    (an index into `program.steps`; `len(steps)` means "after every step")."""

    program: ssa.Program
    original: ssa.Program
    history: dict[int, list[tuple[int, iv.Interval]]] = field(repr=False)
    vacuous: bool = False  # an assume is false for every input: nothing after it is reachable
    stats: dict[str, int] = field(default_factory=dict)

    def interval(self, node: Node, step: int | None = None) -> iv.Interval:
        entries = self.history.get(node.id)
        if entries is None:
            return iv.type_range(node.ty)
        if step is None:
            return entries[-1][1]
        result = None
        for time, interval in entries:
            if time > step:
                break
            result = interval
        return result if result is not None else iv.type_range(node.ty)

    def getter(self, step: int | None):
        """A function node -> interval at `step`, computing (and caching) missing ones."""
        cache: dict[int, iv.Interval] = {}

        def get(node: Node) -> iv.Interval:
            found = cache.get(node.id)
            if found is not None:
                return found
            if node.id in self.history:
                found = self.interval(node, step)
            else:
                order = [n for n in ssa.topological([node]) if n.id not in cache and n.id not in self.history]
                for item in order:
                    cache[item.id] = iv.transfer(item, get)
                found = cache[node.id]
            cache[node.id] = found
            return found

        return get


class _Simplifier:
    def __init__(self, program: ssa.Program, deadline: float | None) -> None:
        self.program = program
        self.m: NodeManager = program.manager  # type: ignore[assignment]
        self.deadline = deadline
        self.memo: dict[int, Node] = {}
        self.history: dict[int, list[tuple[int, iv.Interval]]] = {}
        self.base: dict[
            int, tuple[Node | None, bool]
        ] = {}  # id -> (the one value it depends on, reads a table)
        self.now = 0
        self.stats = {"rewrites": 0, "tabulated": 0}
        self._ticks = 0

    # -------------------------------------------------------------- intervals

    def get(self, node: Node) -> iv.Interval:
        entries = self.history.get(node.id)
        if entries is not None:
            return entries[-1][1]
        order = [n for n in ssa.topological([node], self.history) if n.id not in self.history]
        for item in order:
            self.history[item.id] = [(self.now, iv.transfer(item, self.get))]
        return self.history[node.id][-1][1]

    def refine(self, node: Node, interval: iv.Interval, time: int) -> bool:
        """Narrow the interval of node from `time` on; False if it becomes empty."""
        current = self.get(node)
        new = iv.meet(current, interval)
        if not iv.is_any_float(new) and new[0] > new[1]:
            return False
        if new != current:
            self.history[node.id].append((time, new))
        return True

    # -------------------------------------------------------------- the walk

    def simplify(self, root: Node) -> Node:
        memo = self.memo
        for node in ssa.topological([root], memo):
            if node.id in memo:
                continue
            children = node.children()
            self._tick()
            new = self._rebuild(node, children) if children else node
            memo[node.id] = self.rewrite(new)
        return memo[root.id]

    def _rebuild(self, node: Node, children: tuple[Node, ...]) -> Node:
        """The node over its simplified children; an always-active integer ReLU stays max(x, 0).

        Replacing it by x would be exact, but the relaxation bounds the rounding error of each
        product w * h / 2^l *per box* when h is a ReLU (often exactly: 0 while the product is below
        the rounding threshold), and only by a generic half unit per product when h is a sum. With
        the invariants injected (which make many ReLUs always active) ACAS Xu 1_1 φ4 per-op needed
        over 38,000 boxes against 4,800 without them.
        """
        memo, m = self.memo, self.m
        x = _relu_argument(node) if isinstance(node, Ite) and node.ty.is_int else None
        if x is not None:
            active = m.false if node.b is x else m.true  # the condition's value that selects x
            if memo[node.c.id] is active:
                return m.binary("max", memo[x.id], m.const(x.ty, 0))
        return m.rebuild(node, tuple(memo[child.id] for child in children))

    def _tick(self) -> None:
        self._ticks += 1
        if self._ticks & 0x3FFF == 0 and self.deadline is not None and _time.monotonic() > self.deadline:
            raise ResourceLimitError("timeout during simplification")

    def rewrite(self, node: Node) -> Node:
        for _ in range(16):
            new = self._rewrite_once(node)
            if new is node:
                break
            self.stats["rewrites"] += 1
            node = new
        self.get(node)
        base, table = self._base_of(node)
        if (
            table
            and base is not None
            and base is not node
            and node.ty.is_int
            and base.ty.is_int
            and isinstance(node, (Read, Ite))
        ):
            tabulated = self._tabulate(node, base)
            if tabulated is not None:
                node = tabulated
                self.get(node)
        if node.id not in self.base:
            self.base[node.id] = (base if base is not node else node, table)
        return node

    def _rewrite_once(self, node: Node) -> Node:
        m = self.m
        if isinstance(node, Compare):
            decided = iv._compare(node, self.get(node.a), self.get(node.b))
            if decided == iv.TRUE_I:
                return m.true
            if decided == iv.FALSE_I:
                return m.false
            return node
        if isinstance(node, Ite):
            c = self.get(node.c)
            if c == iv.TRUE_I:
                return node.a
            if c == iv.FALSE_I:
                return node.b
            if node.ty.is_int:
                return self._ite_patterns(node)
            return node
        if isinstance(node, Binary) and node.op in ("max", "min") and node.ty.is_int:
            a, b = self.get(node.a), self.get(node.b)
            if node.op == "max":
                # an always-active ReLU max(x, 0) stays (see _rebuild)
                if a[0] >= b[1] and not _is_zero(node.b):
                    return node.a
                if b[0] >= a[1] and not _is_zero(node.a):
                    return node.b
            else:
                if a[1] <= b[0]:
                    return node.a
                if b[1] <= a[0]:
                    return node.b
            return node
        if isinstance(node, Binary) and node.op == "sub":
            return self._wrap_pattern(node)
        if isinstance(node, Cast) and node.ty.is_int and isinstance(node.a, Cast):
            inner = node.a
            if inner.ty.is_int and (inner.a.ty.is_int or inner.a.ty.is_bool):
                lo, hi = self.get(inner.a)
                if inner.ty.min <= lo and hi <= inner.ty.max:
                    return m.cast(node.ty, inner.a)  # (T)(U)x -> (T)x when x fits U
            return node
        return node

    def _ite_patterns(self, node: Ite) -> Node:
        m = self.m
        c, a, b = node.c, node.a, node.b
        if isinstance(c, Compare) and c.op in ("lt", "le", "gt", "ge"):
            x, y = c.a, c.b
            less = c.op in ("lt", "le")
            # x < y ? y : x -> max ; x < y ? x : y -> min ; x > y ? x : y -> max ; x > y ? y : x -> min
            if (a is y and b is x) or (a is x and b is y):
                picks_larger = (a is y) == less
                return m.binary("max" if picks_larger else "min", x, y)
            # the same with both branches cast to one type (a max pool over int8 codes compares the
            # int-promoted values and stores the int8 ones): ite(x > y, (T)x, (T)y) -> (T)max(x, y)
            casts = isinstance(a, Cast) and isinstance(b, Cast) and a.ty == b.ty and x.ty == y.ty
            if casts and ((a.a is y and b.a is x) or (a.a is x and b.a is y)):
                picks_larger = (a.a is y) == less
                return m.cast(a.ty, m.binary("max" if picks_larger else "min", x, y))
            # x < c1 ? c1 : min(x, c2)  ->  max(min(x, c2), c1)   (c1 <= c2)
            if (
                less
                and isinstance(y, Const)
                and a is y
                and isinstance(b, Binary)
                and b.op == "min"
                and b.a is x
                and isinstance(b.b, Const)
                and y.value <= b.b.value + (1 if c.op == "le" else 0)
            ):
                return m.binary("max", b, y)
            if c.op == "ge" and isinstance(y, Const) and y.value == 0:
                shifted = self._shift_pattern(x, a, b)
                if shifted is not None:
                    return shifted
        return node

    def _shift_pattern(self, v: Node, a: Node, b: Node) -> Node | None:
        """ite(v >= 0, a, b) with a = (v + h) >> l, b = -((-v + h) >> l): fxp_shift."""
        m = self.m
        if not (isinstance(b, Unary) and b.op == "neg" and isinstance(b.a, Binary) and b.a.op == "shr"):
            return None
        shift = b.a.b
        if not isinstance(shift, Const):
            return None
        inner = b.a.a
        if not (isinstance(inner, Binary) and inner.op == "add" and isinstance(inner.b, Const)):
            return None
        if not (isinstance(inner.a, Unary) and inner.a.op == "neg" and inner.a.a is v):
            return None
        l, offset = int(shift.value), int(inner.b.value)
        if l <= 0:
            return None
        half = 1 << (l - 1)
        # nearest: a = (v + h) >> l, offset h
        if (
            offset == half
            and isinstance(a, Binary)
            and a.op == "shr"
            and a.b is shift
            and isinstance(a.a, Binary)
            and a.a.op == "add"
            and a.a.a is v
            and isinstance(a.a.b, Const)
            and a.a.b.value == half
        ):
            return m.binary("shr_rna", v, shift)
        # floor: a = v >> l, offset 2^l - 1
        if offset == (1 << l) - 1 and isinstance(a, Binary) and a.op == "shr" and a.a is v and a.b is shift:
            return a
        return None

    def _wrap_pattern(self, node: Binary) -> Node:
        """((i64)(((u64)v & MASK) ^ SIGN)) - SIGN -> (i64)(int_w)v, MASK = 2^w - 1, SIGN = 2^(w-1)."""
        m = self.m
        sign = node.b
        if not (isinstance(sign, Const) and node.ty == c_types.I64 and isinstance(node.a, Cast)):
            return node
        xor = node.a.a
        if not (isinstance(xor, Binary) and xor.op == "bxor" and isinstance(xor.b, Const)):
            return node
        band = xor.a
        if not (isinstance(band, Binary) and band.op == "band" and isinstance(band.b, Const)):
            return node
        if not (
            isinstance(band.a, Cast) and band.a.ty.is_int and not band.a.ty.signed and band.a.ty.bits == 64
        ):
            return node
        value = band.a.a
        mask = int(band.b.value)
        width = mask.bit_length()
        if (
            mask != (1 << width) - 1
            or int(xor.b.value) != 1 << (width - 1)
            or int(sign.value) != 1 << (width - 1)
        ):
            return node
        if not (value.ty.is_int and value.ty.signed) or width > value.ty.bits:
            return node
        return m.cast(c_types.I64, m.cast(c_types.int_type(width), value))

    # -------------------------------------------------------------- tabulation

    def _base_of(self, node: Node) -> tuple[Node | None, bool]:
        """The single value `node` depends on (None for constants; the node itself when it depends
        on several) and whether a table is read below it."""
        known = self.base.get(node.id)
        if known is not None:
            return known
        if isinstance(node, Const):
            return (None, False)
        children = node.children()
        if not children:
            return (node, False)
        bases, table = set(), isinstance(node, (Read, Step))
        for child in children:
            child_base, child_table = self.base.get(child.id) or self._base_of(child)
            table = table or child_table
            if child_base is not None:
                bases.add(child_base)
        if len(bases) == 1:
            return (next(iter(bases)), table)
        return (node, False)

    def _tabulate(self, node: Node, base: Node) -> Node | None:
        lo, hi = self.get(base)
        if hi - lo + 1 > 1 << 40:
            return None
        sub = ssa.topological([node], {base.id})
        breakpoints = _breakpoints(sub, base, lo, hi)
        if breakpoints is not None:
            return self._step_from_points(node, base, [lo, *breakpoints])
        points = sorted(
            {
                int(n.b.value) + d
                for n in sub
                if isinstance(n, Compare) and isinstance(n.b, Const)
                for d in (0, 1)
            }
            | {lo, hi + 1}
        )
        regions = [(a, b - 1) for a, b in itertools.pairwise(points) if lo <= a <= b - 1 <= hi]
        runs: list[tuple[int, int]] = []  # (start, value)
        budget = TABULATE_BUDGET
        stack = list(reversed(regions))
        while stack:
            start, stop = stack.pop()
            value = self._constant_on(node, base, start, stop)
            if value is not None:
                runs.append((start, value))
                continue
            size = stop - start + 1
            if size <= ENUMERATE_LIMIT:
                budget -= size
                if budget < 0:
                    return None
                xs = np.arange(start, stop + 1, dtype=np.int64)
                (ys,) = evaluate_nodes([node], {base.id: xs}, size, leaves=[base])
                change = np.flatnonzero(np.diff(ys)) + 1
                runs.append((start, int(ys[0])))
                runs.extend((int(xs[i]), int(ys[i])) for i in change)
                continue
            middle = (start + stop) // 2
            stack.append((middle + 1, stop))
            stack.append((start, middle))
        merged: list[tuple[int, int]] = []
        for start, value in runs:
            if merged and merged[-1][1] == value:
                continue
            merged.append((start, value))
        self.stats["tabulated"] += 1
        return self.m.step(node.ty, base, tuple(s for s, _ in merged), tuple(v for _, v in merged))

    def _step_from_points(self, node: Node, base: Node, starts: list[int]) -> Node:
        """The step function of `node` over base from the starts of pieces on which it is
        constant: one evaluation per piece."""
        xs = np.array(starts, dtype=np.int64)
        (ys,) = evaluate_nodes([node], {base.id: xs}, len(xs), leaves=[base])
        keep = np.concatenate([[True], np.diff(ys) != 0])
        self.stats["tabulated"] += 1
        return self.m.step(node.ty, base, tuple(int(v) for v in xs[keep]), tuple(int(v) for v in ys[keep]))

    def _constant_on(self, node: Node, base: Node, start: int, stop: int) -> int | None:
        """The value of node if it is constant for base in [start, stop] (by intervals), else None."""
        cache: dict[int, iv.Interval] = {base.id: (start, stop)}

        def get(item: Node) -> iv.Interval:
            if item.id in cache:
                return cache[item.id]
            raise KeyError(item.id)

        for item in ssa.topological([node], {base.id}):
            if item.id not in cache:
                cache[item.id] = iv.transfer(item, get)
        lo, hi = cache[node.id]
        return int(lo) if lo == hi else None

    # -------------------------------------------------------------- steps

    def run(self) -> Simplified:
        m = self.m
        steps: list[ssa.Assume | ssa.Assert] = []
        vacuous = False
        for step in self.program.steps:
            self.now = len(steps)
            cond = self.simplify(step.cond)
            if cond is m.true:
                continue
            if isinstance(step, ssa.Assume):
                steps.append(ssa.Assume(cond, step.coord))
            else:
                steps.append(ssa.Assert(cond, step.message, step.coord))
            if cond is m.false:
                vacuous = isinstance(step, ssa.Assume)
                break
            if not self._add_facts(cond, len(steps)):
                if isinstance(step, ssa.Assume):
                    steps[-1] = ssa.Assume(m.false, step.coord)
                    vacuous = True
                break
        program = ssa.Program(self.program.inputs, tuple(steps), self.program.source, m)
        return Simplified(program, self.program, self.history, vacuous, dict(self.stats))

    def _add_facts(self, cond: Node, time: int) -> bool:
        for node, interval in iv.facts(cond).values():
            if not self.refine(node, interval, time):
                return False
        return True


def simplify(program: ssa.Program, deadline: float | None = None) -> Simplified:
    """Simplify a program step by step with intervals (see the module docstring).

    :raises ResourceLimitError: the deadline (time.monotonic()) passed.
    """
    return _Simplifier(program, deadline).run()


def _breakpoints(sub: list[Node], base: Node, lo: int, hi: int) -> list[int] | None:
    """The sorted points in (lo, hi] where a function of `base` may change value, read off its
    structure (`sub`: its nodes, children first, base a leaf); None when the structure does not
    give them or they exceed BREAKPOINT_BUDGET.

    A node is an *alias* base + d when it is base, a widening integer cast of an alias, or an
    alias plus or minus a constant that cannot wrap for base in [lo, hi]. A node is *piecewise
    constant* with breakpoints B when it is constant on every interval of base values between
    consecutive points of B: constants (B empty); a step of an alias (its starts less d) or of a
    piecewise-constant value; any operation, read, cast or ite of piecewise-constant operands (the
    union); a comparison of an alias base + d with a piecewise-constant value v whose values are
    known (constants, steps, table reads: V): on an interval where v = c, base + d >= c, > c,
    <= c, < c, == c change only at base = c - d or c - d + 1, so B(v) and those for every c in
    V. No other operation on an alias is piecewise constant. Why: the requantization
    `qv_requant(acc, t)` compares acc with table entries t[q + 63] whose index depends on earlier
    comparisons; bisecting acc's interval with interval evaluation took ~0.8 s per neuron for acc
    in [-290000, 290000], this reads its at most 2 * 255 breakpoints off the comparisons."""
    points: dict[int, set[int]] = {}  # node id -> breakpoints
    values: dict[int, set[int] | None] = {}  # node id -> the values it takes, if known
    offset = {base.id: 0}  # aliases: node id -> d with node = base + d

    def inside(candidates) -> set[int]:
        return {int(c) for c in candidates if lo < c <= hi}

    for node in sub:
        if node.id in offset:
            continue
        alias = _alias_offset(node, offset, lo, hi)
        if alias is not None:
            offset[node.id] = alias
            continue
        children = node.children()
        if isinstance(node, Const):
            points[node.id], values[node.id] = set(), {node.value} if node.ty.is_int else None
            continue
        if isinstance(node, Step):
            d = offset.get(node.a.id)
            own = inside(start - d for start in node.starts) if d is not None else points[node.a.id]
            points[node.id], values[node.id] = own, set(node.values)
        elif isinstance(node, Compare) and (node.a.id in offset) != (node.b.id in offset):
            d, other = (offset[node.a.id], node.b) if node.a.id in offset else (offset[node.b.id], node.a)
            known = values.get(other.id)
            if known is None:
                return None
            points[node.id] = (
                points[other.id] | inside(c - d for c in known) | inside(c - d + 1 for c in known)
            )
            values[node.id] = None
        elif any(child.id in offset for child in children):
            return None  # another operation on base: not piecewise constant
        else:
            points[node.id] = set().union(*(points[child.id] for child in children))
            readable = isinstance(node, Read) and node.ty.is_int and len(node.table) <= BREAKPOINT_BUDGET
            values[node.id] = set(node.table.values) if readable else None
        if len(points[node.id]) > BREAKPOINT_BUDGET:
            return None
    return sorted(points[sub[-1].id])


def _alias_offset(node: Node, offset: dict[int, int], lo: int, hi: int) -> int | None:
    """d when `node` is base + d given the aliases in `offset` (see `_breakpoints`), else None."""
    if isinstance(node, Cast) and node.a.id in offset and iv._widening_source(node) is node.a:
        return offset[node.a.id]
    if not (isinstance(node, Binary) and node.op in ("add", "sub") and node.ty.is_int):
        return None
    a, b = node.a, node.b
    if node.op == "add" and isinstance(a, Const):
        a, b = b, a
    if not (a.id in offset and isinstance(b, Const)):
        return None
    d = offset[a.id] + (int(b.value) if node.op == "add" else -int(b.value))
    if node.ty.min <= lo + d and hi + d <= node.ty.max:
        return d
    return None


def _is_zero(node: Node) -> bool:
    return isinstance(node, Const) and node.value == 0


def _relu_argument(node: Ite) -> Node | None:
    """x for a ReLU written as a comparison of x with 0 that chooses x or 0, else None."""
    c = node.c
    if not (isinstance(c, Compare) and c.op in ("lt", "le", "gt", "ge") and _is_zero(c.b)):
        return None
    x = c.a
    if (node.a is x and _is_zero(node.b)) or (node.b is x and _is_zero(node.a)):
        return x
    return None
