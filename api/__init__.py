"""The costmodel HTTP service: a Flask application factory and a gunicorn launcher."""

from .app import create_app as create_app
from .serve import serve as serve

__all__ = ["create_app", "serve"]
