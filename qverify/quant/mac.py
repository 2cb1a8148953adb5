"""The order of additions in a neuron's multiply-accumulate, shared by the simulator and codegen.

Terms are numbered 0..n: term 0 is the bias, term i+1 the product w_i * x_i.
- sequential: ((b + p_0) + p_1) + ... (thesis Fig. 3.2b)
- balanced: a divide-and-conquer tree over [b, p_0, ..., p_{n-1}] (thesis Fig. 4.6b), split at the
  middle: terms lo..mid on the left, mid+1..hi on the right, mid = (lo + hi) // 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

MacTree = int | tuple["MacTree", "MacTree"]


def balanced_tree(n_inputs: int) -> MacTree:
    """The balanced addition tree over the bias and `n_inputs` products (leaves are term numbers)."""

    def split(lo: int, hi: int) -> MacTree:
        if lo == hi:
            return lo
        mid = (lo + hi) // 2
        return (split(lo, mid), split(mid + 1, hi))

    return split(0, n_inputs)


def sequential_tree(n_inputs: int) -> MacTree:
    """The left-leaning chain b + p_0 + p_1 + ... as a tree (for analyses that walk trees)."""
    tree: MacTree = 0
    for term in range(1, n_inputs + 1):
        tree = (tree, term)
    return tree


def reduce_terms(
    n_inputs: int, bias: T, product: Callable[[int], T], plus: Callable[[T, T], T], balanced: bool
) -> T:
    """Fold bias and products with `plus` in the layout's order.

    One routine serves every interpretation of a neuron: the simulator (words), the interval
    analyses (intervals) and codegen (C expressions), so they cannot order additions differently.
    `product(i)` builds the term of input i; it is called once per input, in increasing i for the
    sequential layout and in tree order (left to right) for the balanced one.
    """
    if not balanced:
        acc = bias
        for i in range(n_inputs):
            acc = plus(acc, product(i))
        return acc

    def walk(tree: MacTree) -> T:
        if isinstance(tree, int):
            return bias if tree == 0 else product(tree - 1)
        return plus(walk(tree[0]), walk(tree[1]))

    return walk(balanced_tree(n_inputs))
