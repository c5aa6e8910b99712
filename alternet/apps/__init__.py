"""The apps floor: the only code that wires alternet's libraries together (the ``alternet`` command, training and
evaluation runs, config checks, what a command prints). Its modules, and the import rule that keeps the libraries
below it apart: docs/architecture.md, "Floors and the import rule".
"""
