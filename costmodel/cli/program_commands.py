"""Commands about one program: demo, predict, advise, blame, profile."""

from __future__ import annotations

import json
from pathlib import Path

from .common import emit, model_placement, program_of, traced


def cmd_demo(args) -> int:
    from .. import _demo

    rows = _demo.run(compile_programs=not args.no_compile, budget_seconds=args.budget,
                     as_json=args.json)
    if args.json:
        emit(rows, True)
    return 0


def staged(args):
    """The program `args` name, traced (never compiled) into a stage."""
    from .._stage import lower

    fn, shapes = program_of(args)
    return traced(lambda: lower(fn, *shapes))


def cmd_predict(args) -> int:
    backend, target = model_placement(args)
    pred = staged(args).predict(backend=backend, target=target, model=args.model,
                                process_state=args.process_state)
    text, data = repr(pred), pred.to_dict()
    if args.explain:
        found = pred.explain()
        data["explain"] = [effect.to_dict() for effect in found]
        text += "\n" + ("\n".join(f"  {effect}" for effect in found) if found else
                        "  no quantity of the program changes the prediction by 1% or more "
                        "when halved")
    emit(data, args.json, text)
    return 0


def cmd_advise(args) -> int:
    backend, target = model_placement(args)
    advice = staged(args).advise(budget_seconds=args.budget, backend=backend, target=target,
                                 model=args.model)
    emit(advice.to_dict(), args.json, str(advice))
    return 0


def cmd_blame(args) -> int:
    backend, target = model_placement(args)
    blame = staged(args).blame(backend=backend, target=target, model=args.model)
    text = str(blame).splitlines()[:2 + args.top]
    if args.html:
        Path(args.html).write_text(blame.html())
        text.append(f"icicle chart: {args.html}")
    if args.trace:
        Path(args.trace).write_text(json.dumps(blame.trace()))
        text.append(f"trace (open in https://ui.perfetto.dev): {args.trace}")
    emit(blame.to_dict(), args.json, "\n".join(text))
    return 0


def cmd_profile(args) -> int:
    result = staged(args).profile()
    text = str(result)
    if args.html:
        Path(args.html).write_text(result.html())
        text += f"\nicicle chart: {args.html}"
    emit(result.to_dict(), args.json, text)
    return 0


