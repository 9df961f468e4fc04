"""Model artifacts: verify, load, the shipped default models (writing them is
`costmodel.training.fitting.publish`)."""

from .artifact import Artifact as Artifact
from .artifact import ArtifactError as ArtifactError
from .artifact import NoModelError as NoModelError
from .artifact import default_path as default_path
from .artifact import load as load
from .artifact import load_default as load_default
from .artifact import verify as verify

__all__ = ["Artifact", "ArtifactError", "NoModelError", "default_path", "load", "load_default",
           "verify"]
