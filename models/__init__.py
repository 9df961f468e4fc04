"""Model artifacts: save, verify, load, and the shipped default models."""

from .artifact import Artifact as Artifact
from .artifact import ArtifactError as ArtifactError
from .artifact import default_path as default_path
from .artifact import load as load
from .artifact import load_default as load_default
from .artifact import save as save
from .artifact import verify as verify

__all__ = ["Artifact", "ArtifactError", "default_path", "load", "load_default", "save", "verify"]
