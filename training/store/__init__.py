"""The dataset of measured rows: loading, writing, re-extraction and its card."""
