"""Game-tree search: nested while loops whose bodies gather, scatter and branch.

Tree searches and environment rollouts (the shape of AlphaZero-style planners and RL
environments written in JAX) hold many loops, two to four deep, each body a few hundred
gathers, scatters, selects and small reductions over a board. The corpus had few programs
like this (diffrax, netket and jaxley loops hold matmuls and ODE steps), and programs of
this kind from libraries outside the corpus were under-predicted 1.5-2.4x at 1-7 s
(`bench/evaluations/outside_libraries.py`: mctx, evosax, pgx, gymnax). This family does not show why:
measured (20 programs, 1.4-19 s on an AMD EPYC), the model trained without it
over-predicted it 1.6x, and training on it made the outside benches worse, so its rows
are kept with the unshipped families (`bench/data/cpu_unshipped_families.parquet`), not
in the shipped data.

`tree_search` runs `stages` searches one after another (each with its own value head, so
each is its own set of loops), each `simulations` times: select down the tree (a while
loop over depth), expand one leaf with an environment step (`lax.switch` over `rules`
move rules), play out `rollout` random moves (a fori loop with a game-over `lax.cond`),
back the value up the path (a while loop), all under `vmap` over a batch of boards (so
the switch and the cond become selects over every branch, as in batched environments).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import Family, param_grid, register, sds


def _lines(board: jnp.ndarray) -> jnp.ndarray:
    """Score of a board: rows, columns and both diagonals all held by one player."""
    size = board.shape[0]
    rows = jnp.abs(board.sum(axis=1))
    cols = jnp.abs(board.sum(axis=0))
    diag = jnp.abs(jnp.trace(board))
    anti = jnp.abs(jnp.trace(board[:, ::-1]))
    full = jnp.concatenate([rows, cols, jnp.stack([diag, anti])])
    return jnp.max(full).astype(jnp.float32) / size


def _move_rules(size: int, rules: int):
    """`rules` ways to play at a cell: place, place and flip a neighbour, place and clear
    a row... each a pure function of (board, cell, player)."""
    def place(board, cell, player):
        return board.at[cell // size, cell % size].set(player)

    def make(k: int):
        def rule(board, cell, player):
            board = place(board, cell, player)
            row, col = cell // size, cell % size
            shift = (k % (size - 1)) + 1
            neighbour = ((row + shift) % size, (col + k) % size)
            flipped = board.at[neighbour].multiply(-1 if k % 2 else 1)
            if k % 3 == 2:
                line = jnp.where(jnp.abs(flipped.sum(axis=1, keepdims=True)) == size, 0,
                                 flipped)
                return line
            return flipped
        return rule

    return [place] + [make(k) for k in range(1, rules)]


def build_tree_search(batch: int, board: int, simulations: int, depth: int, rollout: int,
                      rules: int, stages: int):
    size, cells = board, board * board
    nodes = simulations + 1
    rule_fns = _move_rules(size, rules)

    def step(state, cell, player):
        legal = state[cell // size, cell % size] == 0
        which = jnp.mod(cell + (player > 0), rules)
        moved = lax.switch(which, rule_fns, state, cell, player)
        return jnp.where(legal, moved, state)

    def search(root, key, head):
        visits = jnp.zeros((nodes,), jnp.float32).at[0].set(1.0)
        values = jnp.zeros((nodes,), jnp.float32)
        children = jnp.full((nodes, cells), -1, jnp.int32)
        states = jnp.zeros((nodes, size, size), jnp.int32).at[0].set(root)
        tree = (visits, values, children, states)

        def simulate(sim, carry):
            (visits, values, children, states), key = carry
            key, pick, play = jax.random.split(key, 3)

            def descend(c):
                node, d, path = c
                kids = children[node]
                known = kids >= 0
                kid_visits = jnp.where(known, visits[jnp.maximum(kids, 0)], 0.0)
                kid_values = jnp.where(known, values[jnp.maximum(kids, 0)], 0.0)
                ucb = kid_values / (kid_visits + 1) + 1.4 * jnp.sqrt(
                    jnp.log(visits[node] + 1) / (kid_visits + 1))
                best = jnp.argmax(jnp.where(known, ucb, -jnp.inf))
                nxt = kids[best]
                return nxt, d + 1, path.at[d + 1].set(nxt)

            def can_descend(c):
                node, d, _ = c
                return (d < depth) & jnp.any(children[node] >= 0) & (
                    jnp.sum(children[node] >= 0) >= jnp.minimum(d + 2, cells))

            path = jnp.full((depth + 2,), -1, jnp.int32).at[0].set(0)
            leaf, d, path = lax.while_loop(can_descend, descend, (jnp.int32(0), 0, path))
            cell = jax.random.randint(pick, (), 0, cells)
            player = jnp.where(d % 2 == 0, 1, -1)
            new = sim + 1
            child_state = step(states[leaf], cell, player)
            states = states.at[new].set(child_state)
            children = children.at[leaf, cell].set(new)
            path = path.at[d + 1].set(new)

            def play_out(i, c):
                state, key, done = c
                key, sub = jax.random.split(key)
                move = jax.random.randint(sub, (), 0, cells)
                over = _lines(state) >= 1.0
                state = lax.cond(done | over, lambda s: s,
                                 lambda s: step(s, move, jnp.where(i % 2 == 0, -player,
                                                                   player)), state)
                return state, key, done | over

            final, _, _ = lax.fori_loop(0, rollout, play_out,
                                        (child_state, play, jnp.bool_(False)))
            value = jnp.tanh(jnp.sum(final.astype(jnp.float32) * head)) + _lines(final)

            def back_up(c):
                i, visits, values = c
                node = path[i]
                sign = jnp.where(i % 2 == 0, 1.0, -1.0)
                return i - 1, visits.at[node].add(1.0), values.at[node].add(sign * value)

            _, visits, values = lax.while_loop(
                lambda c: (c[0] >= 0) & (path[jnp.maximum(c[0], 0)] >= 0), back_up,
                (d + 1, visits, values))
            return (visits, values, children, states), key

        (visits, values, _, _), _ = lax.fori_loop(0, simulations, simulate, (tree, key))
        return values[0] / visits[0]

    def fn(roots, keys, heads):
        total = jnp.zeros((batch,), jnp.float32)
        for s in range(stages):  # each stage its own search: its own loops
            total = total + jax.vmap(search, in_axes=(0, 0, None))(roots, keys[s], heads[s])
        return total

    return fn, (sds((batch, size, size), np.int32),
                sds((stages, batch, 2), np.uint32),
                sds((stages, size, size)))


register(Family(
    "tree_search",
    "batched game-tree search: select, expand, roll out and back up in nested while loops",
    build_tree_search,
    grid=param_grid(batch=(16,), board=(3, 6), simulations=(16,), depth=(4,), rollout=(8,),
                    rules=(2, 6), stages=(1, 2, 4, 8, 16)),
))
