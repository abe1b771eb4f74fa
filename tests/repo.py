"""Paths the tests share."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
