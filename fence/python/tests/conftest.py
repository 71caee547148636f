"""Puts the tests' helper modules (vectors, asgi_server) on the import path;
the package itself is imported as installed."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
