"""The byte-mutation harness of gradcomp's Python entry points; tests/fuzz/python_mutation.py
is its command line."""
