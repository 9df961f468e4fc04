"""Batched grid-world environments: a ``lax.switch`` over actions under ``vmap``.

Programs of RL environment libraries (a grid world stepped for a batch of agents) were
the outside programs the CPU model over-predicted most (0.39-0.64 of the prediction,
`bench/FINDINGS.md`, "XLA's fusion rules on the emulator"). Under ``vmap`` a switch
over actions computes every branch and selects among the results leaf by leaf; a branch
that leaves a leaf alone returns it as it came, so the batched program holds many
``select(p, x, x)`` that XLA's simplifier drops before fusing. The corpus had almost none
of them; this family is made of them.

Measured (32 programs, 0.11-2.97 s on an AMD EPYC), the model fitted on the corpus put
them at 0.74 of their compile on schema-18 inputs and 1.45 on 19's, and training on them
moved the outside suites no better, so their rows are kept apart
(`bench/data/cpu_grid_world.parquet`), not in the shipped data.

``grid_world`` steps ``batch`` agents through a ``size`` x ``size`` world of tiles and
colours: ``actions`` moves (forward, turns, pick up, drop, toggle a door; each touches
one or two of the state's eight leaves), then ``rules`` rewrite rules (a tile next to
another, or one held in the pocket, becomes a third), a goal check and an egocentric
``view`` x ``view`` observation rotated by the agent's direction. ``rollout`` > 0 runs
that many steps with random actions in a ``scan`` and auto-resets finished agents;
0 is one step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import Family, param_grid, register, sds

_EMPTY, _FLOOR, _WALL, _BALL, _KEY, _DOOR_SHUT, _DOOR_OPEN, _GOAL = range(8)
_DIRECTIONS = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]], np.int32)


def _ahead(state):
    step = jnp.asarray(_DIRECTIONS)[state["dir"]]
    size = state["grid"].shape[0]
    return jnp.clip(state["pos"] + step, 0, size - 1)


def _tile(grid, cell):
    return grid[cell[0], cell[1]]


def _forward(state):
    cell = _ahead(state)
    tile = _tile(state["grid"], cell)[0]
    free = (tile == _FLOOR) | (tile == _GOAL) | (tile == _DOOR_OPEN)
    return {**state, "pos": jnp.where(free, cell, state["pos"])}


def _turn(by: int):
    def turn(state):
        return {**state, "dir": (state["dir"] + by) % 4}
    return turn


def _pick_up(state):
    cell = _ahead(state)
    tile = _tile(state["grid"], cell)
    can = ((tile[0] == _BALL) | (tile[0] == _KEY)) & (state["pocket"][0] == _EMPTY)
    floor = jnp.array([_FLOOR, 0], jnp.int32)
    grid = state["grid"].at[cell[0], cell[1]].set(jnp.where(can, floor, tile))
    return {**state, "grid": grid, "pocket": jnp.where(can, tile, state["pocket"])}


def _drop(state):
    cell = _ahead(state)
    tile = _tile(state["grid"], cell)
    can = (tile[0] == _FLOOR) & (state["pocket"][0] != _EMPTY)
    grid = state["grid"].at[cell[0], cell[1]].set(jnp.where(can, state["pocket"], tile))
    empty = jnp.zeros((2,), jnp.int32)
    return {**state, "grid": grid, "pocket": jnp.where(can, empty, state["pocket"])}


def _toggle(state):
    cell = _ahead(state)
    tile = _tile(state["grid"], cell)
    fits = (tile[0] == _DOOR_SHUT) & (state["pocket"][0] == _KEY) & (
        state["pocket"][1] == tile[1])
    opened = jnp.array([_DOOR_OPEN, 0], jnp.int32).at[1].set(tile[1])
    grid = state["grid"].at[cell[0], cell[1]].set(jnp.where(fits, opened, tile))
    return {**state, "grid": grid}


_ACTIONS = (_forward, _turn(1), _turn(3), _pick_up, _drop, _toggle)


def _neighbours(mask):
    """Cells with a 4-neighbour where ``mask`` holds."""
    padded = jnp.pad(mask, 1)
    return padded[:-2, 1:-1] | padded[2:, 1:-1] | padded[1:-1, :-2] | padded[1:-1, 2:]


def _rule(k: int):
    """Rule ``k``: a tile of kind a (colour k) beside kind b becomes kind c, or the
    pocket's tile turns into c when the agent faces b; which one by ``k % 3``."""
    a, b, c = _BALL + k % 2, (_KEY, _DOOR_SHUT, _GOAL)[k % 3], (_GOAL, _BALL, _KEY)[k % 3]
    colour = k % 5

    def near(state):
        grid = state["grid"]
        is_a = (grid[..., 0] == a) & (grid[..., 1] == colour)
        hit = is_a & _neighbours(grid[..., 0] == b)
        new = jnp.stack([jnp.full(hit.shape, c, jnp.int32), grid[..., 1]], -1)
        return {**state, "grid": jnp.where(hit[..., None], new, grid)}

    def held(state):
        facing = _tile(state["grid"], _ahead(state))[0] == b
        holds = (state["pocket"][0] == a) & (state["pocket"][1] == colour) & facing
        pocket = jnp.where(holds, jnp.array([c, colour], jnp.int32), state["pocket"])
        return {**state, "pocket": pocket}

    return (near, held, near)[k % 3]


def _view(grid, pos, direction, view: int):
    padded = jnp.pad(grid, ((view, view), (view, view), (0, 0)), constant_values=_WALL)
    half = view // 2
    patch = lax.dynamic_slice(padded, (pos[0] + view - half, pos[1] + view - half, 0),
                              (view, view, 2))
    turns = [lambda p, k=k: jnp.rot90(p, k) for k in range(4)]
    return lax.switch(direction, turns, patch)


def build_grid_world(batch: int, size: int, actions: int, rules: int, rollout: int,
                     view: int = 5):
    moves = _ACTIONS[:actions]
    rule_fns = [_rule(k) for k in range(rules)]
    limit = 4 * size * size

    def step(state, action, rule_kinds):
        state = lax.switch(action, moves, state)
        for k, rule in enumerate(rule_fns):  # each rule on or off per agent
            state = lax.cond(rule_kinds[k] > 0, rule, lambda s: s, state)
        cell = state["pos"]
        tile = _tile(state["grid"], cell)[0]
        won = tile == _GOAL
        steps = state["steps"] + 1
        done = won | (steps >= limit)
        reward = jnp.where(won, 1.0 - 0.9 * steps / limit, 0.0).astype(jnp.float32)
        state = {**state, "steps": steps, "done": done}
        obs = _view(state["grid"], state["pos"], state["dir"], view)
        return state, obs, reward

    def reset(start, state):
        return {**start, "key": state["key"]}

    def rollout_one(start, rule_kinds):
        def body(state, _):
            key, sub = jax.random.split(state["key"])
            action = jax.random.randint(sub, (), 0, actions)
            state, obs, reward = step({**state, "key": key}, action, rule_kinds)
            state = lax.cond(state["done"], reset, lambda s, t: t, start, state)
            return state, (obs, reward)
        last, (obs, rewards) = lax.scan(body, start, None, length=rollout)
        return last, obs[-1], rewards.sum()

    def fn(state, actions_taken, rule_kinds):
        if rollout:
            return jax.vmap(rollout_one)(state, rule_kinds)
        return jax.vmap(step)(state, actions_taken, rule_kinds)

    state = {"grid": sds((batch, size, size, 2), np.int32),
             "pos": sds((batch, 2), np.int32),
             "dir": sds((batch,), np.int32),
             "pocket": sds((batch, 2), np.int32),
             "steps": sds((batch,), np.int32),
             "key": sds((batch, 2), np.uint32),
             "done": sds((batch,), np.bool_),
             "colour_seen": sds((batch, 5), np.float32)}
    return fn, (state, sds((batch,), np.int32), sds((batch, max(rules, 1)), np.int32))


register(Family(
    "grid_world",
    "batched grid-world steps or rollouts: lax.switch over actions and lax.cond rules "
    "under vmap",
    build_grid_world,
    grid=param_grid(batch=(16,), size=(9, 17), actions=(3, 6), rules=(0, 8, 24, 48),
                    rollout=(0, 16)),
))
