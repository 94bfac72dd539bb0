"""The program's parts, one folder per floor; imports flow one way, floor by floor (tests/test_imports.py)."""
