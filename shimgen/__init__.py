"""shimgen: generate a complete forwarding shim for NVIDIA's CUDA driver library."""

__version__ = "0.1.0"


def face(package: str, names: dict[str, str]):
    """A package's face (PEP 562): the names the rest of shimgen may take from `package`,
    each defined in one of its inner modules and imported the first time it is taken, so
    that importing a package costs nothing (`shimgen run`'s cached path stays light). A
    value names the inner module: "elf" (the name is defined there), "exports:command"
    (under another name there), or "inject:" (the module itself). A name of the face is
    never another inner module's name (tests/devtools/test_layout.py): Python sets a
    package's attribute to each submodule it imports, which would shadow it. Nothing is
    cached: a name is looked up in its module at each import, as a test that replaces it
    there expects."""
    from importlib import import_module

    def __getattr__(name: str):
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, colon, attr = where.partition(":")
        inner = import_module(f"{package}.{module}")
        return inner if colon and not attr else getattr(inner, attr or name)

    return __getattr__, sorted(names)
