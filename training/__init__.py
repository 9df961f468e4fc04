"""costmodel subpackage."""
