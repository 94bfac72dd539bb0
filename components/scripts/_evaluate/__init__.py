"""Parts of evaluate.py: the shipped math set and the answer extraction it is scored with."""
