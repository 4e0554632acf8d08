# Patterns for nanobind's stubgen (python/CMakeLists.txt): it sees gradcomp.Error as a name
# imported from the gradcomp package; the stub declares the class itself.
gradcomp\._core\.Error$:
    class Error(RuntimeError):
        \doc
        code: str
