"""Prototype emulator: reduce absorbs producers, every fusible op duplicates when all
users fuse, slices of concatenated values resolve to the one piece they read."""
from costmodel.features.stablehlo.fusion import Fusions
from costmodel.features.categories import FUSIBLE_HLO, EXPENSIVE_HLO, INDEXING_HLO

ELEMENTWISE_PASS = FUSIBLE_HLO - {"broadcast_in_dim", "reshape", "iota", "transpose", "slice",
                                  "concatenate", "pad", "reverse", "dynamic_slice"}

def _ints(attr):
    return [int(v) for v in attr]

class Variant(Fusions):
    def __init__(self, reduce_root=True, dup_expensive=True, resolve=True, paths=False):
        self.paths = paths
        super().__init__()
        self.reduce_root, self.dup_expensive, self.resolve = reduce_root, dup_expensive, resolve
        self._roots = set(); self._virtual = {}; self._dead_candidates = set(); self._frac = 0

    def visit(self, operands, results, name, weight, rank):
        if name == "reduce" and self.reduce_root:
            weight = 1.0
            self._roots.add(self._count)
        if name == "slice" and self.resolve and operands:
            sliced = self._resolve_slice(operands[0], results[0])
            if sliced is not None:
                operands = [sliced] + list(operands[1:])
        super().visit(operands, results, name, weight, rank)
        if name == "divide" and _constant(operands[1]) and (self._count - 1) in self._fusible:
            w, cheap, ix, un = self._fusible[self._count - 1]
            self._fusible[self._count - 1] = (1.0, True, ix, un)  # XLA multiplies by 1/c

    # --- slice resolution ---
    def _resolve_slice(self, value, result):
        op = result.owner
        try:
            starts = _ints(op.attributes["start_indices"]); limits = _ints(op.attributes["limit_indices"])
            strides = _ints(op.attributes["strides"])
            shape = list(value.type.shape)
        except Exception:
            return None
        dims = [d for d in range(len(shape)) if (starts[d], limits[d]) != (0, shape[d])]
        if len(dims) != 1 or strides[dims[0]] != 1:
            return None
        d = dims[0]
        self._base = self._count  # virtual ops sit just before the slice
        self._frac = 0
        self._memo = {}
        out = self._resolve(value, d, starts[d], limits[d], depth=0)
        return out if out is not value else None

    def _resolve(self, value, d, lo, hi, depth):
        key = (value, d, lo, hi)
        if key in self._memo: return self._memo[key]
        self._memo[key] = value
        owner = getattr(value, "owner", None)
        name = getattr(owner, "name", "")
        if depth > 64 or not name.startswith("stablehlo."):
            return value
        short = name[len("stablehlo."):]
        if short == "concatenate":
            dim = int(owner.attributes["dimension"].value)
            if dim != d: return value
            start = 0
            for operand in owner.operands:
                size = operand.type.shape[d]
                if start <= lo and hi <= start + size:
                    out = self._resolve(operand, d, lo - start, hi - start, depth + 1)
                    if out is operand and (lo - start, hi - start) != (0, size):
                        out = operand  # reads part of a piece: the piece itself
                    self._mark_dead(value)
                    self._memo[key] = out
                    return out
                start += size
            return value
        if short in ELEMENTWISE_PASS and len(owner.results) == 1:
            shape = list(value.type.shape)
            new_operands = []
            changed = False
            for operand in owner.operands:
                oshape = list(operand.type.shape) if hasattr(operand.type, "shape") else []
                if oshape == shape:
                    r = self._resolve(operand, d, lo, hi, depth + 1)
                    changed |= r is not operand
                    new_operands.append(r)
                else:
                    new_operands.append(operand)
            if not changed:
                return value
            virtual = _Virtual()
            position = self._base - 0.5 + self._frac * 1e-6; self._frac += 1
            pos_orig = self._producer.get(value)
            weight, cheap, indexing, unary = self._fusible.get(pos_orig, (1.0, True, False, True))
            self._count_virtual(position, new_operands, virtual, (weight, cheap, indexing, unary))
            self._mark_dead(value)
            self._memo[key] = virtual
            return virtual
        return value

    def _count_virtual(self, position, operands, virtual, info):
        for operand in operands:
            producer = self._producer.get(operand)
            if producer is not None:
                self._users.setdefault(producer, set()).add(position)
        self._producer[virtual] = position
        self._fusible[position] = info
        self._rank[position] = None

    def _mark_dead(self, value):
        p = self._producer.get(value)
        if p is not None: self._dead_candidates.add(p)

    def _blocked(self):
        # positions from which some path to one of their users runs through an op that
        # does not fuse (XLA then will not duplicate them)
        nodes = set(self._users) | set(self._fusible)
        for us in self._users.values(): nodes |= us
        order = sorted(nodes)
        nonfusible = [p for p in order if p not in self._fusible]
        bit = {p: 1 << i for i, p in enumerate(nonfusible)}
        operands = {}
        for p, us in self._users.items():
            for u in us: operands.setdefault(u, []).append(p)
        anc = {}
        for p in order:
            a = 0
            for q in operands.get(p, ()):
                a |= anc.get(q, 0) | bit.get(q, 0)
            anc[p] = a
        desc = {}
        for p in reversed(order):
            d = 0
            for u in self._users.get(p, ()):
                d |= desc.get(u, 0) | bit.get(u, 0)
            desc[p] = d
        return {p for p in self._fusible if desc[p] and any(anc.get(u, 0) & desc[p] for u in self._users.get(p, ()))}

    def groups(self):
        fusion_of, groups, dead = {}, [], set()
        blocked = self._blocked() if self.paths else set()
        def new():
            groups.append([0, 0.0, 0]); return len(groups) - 1
        # a slice rewired away from its operand leaves that operand without the slice
        for position in sorted(self._fusible, reverse=True):
            weight, cheap, indexing, unary = self._fusible[position]
            users = {u for u in self._users.get(position, set()) if u not in dead}
            if position in self._dead_candidates or any(u in dead for u in self._users.get(position, ())):
                if not users and position not in self._roots:
                    dead.add(position); continue
            fused = [u for u in users if u in fusion_of]
            joined = set().union(*(fusion_of[u] for u in fused))
            dup_ok = (cheap or self.dup_expensive) and position not in blocked
            if position in self._roots:
                targets = {new()}
            elif users and len(fused) == len(users) and (len(joined) == 1 or dup_ok):
                targets = joined
            elif dup_ok and unary and joined:
                targets = joined | {new()}
            else:
                targets = {new()}
            fusion_of[position] = targets
            for f in targets:
                groups[f][0] += 1; groups[f][1] += weight; groups[f][2] += indexing
        return groups

def _constant(value):
    owner = getattr(value, "owner", None)
    name = getattr(owner, "name", "")
    if name == "stablehlo.constant":
        return True
    if name == "stablehlo.broadcast_in_dim":
        return _constant(owner.operands[0])
    return False

def _noop(): pass

class _Virtual:
    pass
