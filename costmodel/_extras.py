"""Which optional extra a missing module comes from, so errors say what to install."""

from __future__ import annotations

# top-level module -> the extra of pyproject.toml that installs it
EXTRA_OF = {
    **dict.fromkeys(("sklearn", "scipy", "pandas", "joblib", "psutil", "tqdm", "pyarrow",
                     "matplotlib", "threadpoolctl"), "train"),
    **dict.fromkeys(("flask", "gunicorn", "werkzeug", "pydantic", "pydantic_core", "sqlalchemy",
                     "alembic"), "serve"),
    "psycopg": "postgres",
    **dict.fromkeys(("dask", "distributed"), "dask"),  # `costmodel sweep --dask`
}


def missing_extra(exc: ImportError) -> str | None:
    """The extra that provides the module `exc` failed to import, or None."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    return EXTRA_OF.get(name)


def require(extra: str, what: str) -> None:
    """Raise ImportError naming the extra when any of its modules is missing."""
    import importlib.util

    missing = sorted(m for m, e in EXTRA_OF.items()
                     if e == extra and m != "werkzeug" and importlib.util.find_spec(m) is None)
    if missing:
        raise ImportError(f"{what} needs the {extra!r} extra ({', '.join(missing)} missing): "
                          f"pip install 'costmodel[{extra}]'")
